// The attempt log on a cluster (supervisor/broker/kafka_attempt_log.h):
// entries written by two workers, read back from a commit's N and folded,
// against librdkafka's mock cluster created in this process
// (rdkafka_mock.h). With the unit tests rather than e2e: no pillbox process
// runs and no server is started, the mock is a library's threads, a test
// takes well under a second; a worker's e2e tests will use the mock in a
// process of its own, as issue 29 asks.
//
// Also measures a write's round trip (1, 8, 64 entries) and the read of a
// window of 10 000 entries (printed; the figures are the mock's, on
// loopback: a real cluster adds its network and replication). The fold's
// figure is not the worker's: the unit tests are compiled with -O0
// (tests/CMakeLists.txt), and the linker keeps their copies of nlohmann's
// and the standard library's inline functions for the library code too
// (1.1 s here for 10 000 entries; 0.15 s with this file built -O2).
#include <doctest/doctest.h>
#include <librdkafka/rdkafka.h>
#include <librdkafka/rdkafka_mock.h>
#include <librdkafka/rdkafkacpp.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <memory>
#include <string>
#include <vector>

#include "supervisor/broker/kafka_attempt_log.h"
#include "supervisor/broker/kafka_config.h"
#include "supervisor/broker/kafka_producer.h"
#include "supervisor/broker/kafka_worker_topics.h"
#include "supervisor/broker/kafka_attempts.h"

namespace {

using namespace pillbox;
using namespace pillbox::broker;
using Clock = std::chrono::steady_clock;

// A mock cluster of 3 brokers, alive as long as this.
class MockCluster {
 public:
  MockCluster() {
    char errstr[512];
    rd_kafka_conf_t* conf = rd_kafka_conf_new();
    rd_kafka_conf_set(conf, "log_level", "3", errstr, sizeof errstr);  // the mock's own chatter aside
    handle_ = rd_kafka_new(RD_KAFKA_PRODUCER, conf, errstr, sizeof errstr);
    REQUIRE_MESSAGE(handle_ != nullptr, errstr);
    cluster_ = rd_kafka_mock_cluster_new(handle_, 3);
    REQUIRE(cluster_ != nullptr);
  }
  ~MockCluster() {
    rd_kafka_mock_cluster_destroy(cluster_);
    rd_kafka_destroy(handle_);
  }
  MockCluster(const MockCluster&) = delete;
  MockCluster& operator=(const MockCluster&) = delete;

  void create_topic(const std::string& name, int partitions) {
    REQUIRE(rd_kafka_mock_topic_create(cluster_, name.c_str(), partitions, 3) == RD_KAFKA_RESP_ERR_NO_ERROR);
  }
  // T and its attempt log, of `partitions` each: what a worker's settings name.
  AttemptLogSettings topic_and_log(const std::string& topic, int partitions) {
    create_topic(topic, partitions);
    create_topic(attempt_log_topic(topic), partitions);
    return settings(topic);
  }
  // Every broker down (true) or up again.
  void set_down(bool down) {
    for (int id = 1; id <= 3; ++id) {
      REQUIRE((down ? rd_kafka_mock_broker_set_down(cluster_, id) : rd_kafka_mock_broker_set_up(cluster_, id)) ==
              RD_KAFKA_RESP_ERR_NO_ERROR);
    }
  }
  AttemptLogSettings settings(const std::string& topic) const {
    AttemptLogSettings s;
    s.brokers = rd_kafka_mock_cluster_bootstraps(cluster_);
    s.topic = topic;
    s.timeout = std::chrono::seconds(10);
    s.properties = {{"log_level", "3"}};
    return s;
  }

 private:
  rd_kafka_t* handle_ = nullptr;
  rd_kafka_mock_cluster_t* cluster_ = nullptr;
};

// Where each entry of a write landed, or why not.
struct Written {
  std::int64_t log_offset = -1;
  std::string error;
};

// The worker's producer (kafka_producer.h) writing attempt-log entries as
// KafkaBackEnd::write_entry does, each to its partition; write() waits for
// every report.
class EntryWriter {
 public:
  explicit EntryWriter(const AttemptLogSettings& settings) : settings_(settings) {
    auto properties = settings.properties;
    properties.emplace_back("bootstrap.servers", settings.brokers);
    properties.emplace_back("message.timeout.ms", std::to_string(settings.timeout.count()));
    auto p = KafkaProducer::open(properties);
    REQUIRE_MESSAGE(p.has_value(), (p ? "" : p.error()));
    producer_ = std::move(*p);
  }
  std::vector<Written> write(const std::vector<AttemptEntry>& entries) {
    // Shared with the callbacks: a report that comes after the wait below
    // gave up writes here, not into a vector gone.
    auto out = std::make_shared<std::vector<Written>>(entries.size());
    for (std::size_t i = 0; i < entries.size(); ++i) {
      Status s = producer_->produce(attempt_entry_record(settings_.topic, entries[i]),
                                    [out, i](const Expected<KafkaDelivered>& d) {
                                      if (d) (*out)[i].log_offset = d->offset;
                                      else (*out)[i].error = d.error();
                                    });
      if (!s) (*out)[i].error = s.message();
    }
    if (!producer_->flush(static_cast<int>(settings_.timeout.count()) + 5'000)) {
      for (Written& w : *out) {
        if (w.log_offset < 0 && w.error.empty()) w.error = "no delivery report";
      }
    }
    return *out;
  }
  std::string fatal_error() const { return producer_->fatal_error(); }

 private:
  AttemptLogSettings settings_;
  std::unique_ptr<KafkaProducer> producer_;
};

std::unique_ptr<EntryWriter> writer(const AttemptLogSettings& settings) {
  return std::make_unique<EntryWriter>(settings);
}

std::unique_ptr<AttemptLogReader> reader(const AttemptLogSettings& settings) {
  auto r = AttemptLogReader::open(settings);
  REQUIRE_MESSAGE(r.has_value(), (r ? "" : r.error()));
  return std::move(*r);
}

// Writes `entries` and requires each to land; returns their log offsets.
std::vector<std::int64_t> write_all(EntryWriter& w, const std::vector<AttemptEntry>& entries) {
  std::vector<std::int64_t> offsets;
  for (const Written& written : w.write(entries)) {
    REQUIRE_MESSAGE(written.error.empty(), written.error);
    offsets.push_back(written.log_offset);
  }
  return offsets;
}

AttemptLogRead read_all(AttemptLogReader& r, std::int32_t partition, std::optional<std::int64_t> from) {
  auto read = r.read(partition, from);
  REQUIRE_MESSAGE(read.has_value(), (read ? "" : read.error()));
  return std::move(*read);
}

Outcome crash() {
  Outcome o;
  o.kind = Kind::kCrash;
  o.signal = 11;
  o.fingerprint = "pb1-kafka";
  return o;
}

// A record produced by someone else (anyone who may write to the topic).
void produce_raw(const AttemptLogSettings& settings, const std::string& topic, std::int32_t partition,
                 const std::string& key, std::string value) {
  std::string errstr;
  std::unique_ptr<RdKafka::Conf> conf(RdKafka::Conf::create(RdKafka::Conf::CONF_GLOBAL));
  conf->set("bootstrap.servers", settings.brokers, errstr);
  conf->set("log_level", "3", errstr);
  std::unique_ptr<RdKafka::Producer> p(RdKafka::Producer::create(conf.get(), errstr));
  REQUIRE(p != nullptr);
  REQUIRE(p->produce(topic, partition, RdKafka::Producer::RK_MSG_COPY, value.data(), value.size(), key.data(),
                     key.size(), 0, nullptr) == RdKafka::ERR_NO_ERROR);
  REQUIRE(p->flush(10'000) == RdKafka::ERR_NO_ERROR);
}

double ms_since(Clock::time_point t) { return std::chrono::duration<double, std::milli>(Clock::now() - t).count(); }

TEST_CASE("kafka attempt log: a missing attempt log, or one with fewer partitions, is said with how to make it") {
  MockCluster cluster;
  cluster.create_topic("orders", 6);
  auto bootstrap = parse_kafka_bootstrap(cluster.settings("orders").brokers);
  REQUIRE(bootstrap.has_value());
  auto missing = check_kafka_worker_topics(*bootstrap, "orders", false, false);
  REQUIRE_FALSE(missing.has_value());
  CHECK(missing.error().find("orders.pillbox-attempts") != std::string::npos);
  CHECK(missing.error().find("does not exist") != std::string::npos);
  CHECK(missing.error().find("--create --topic orders.pillbox-attempts --partitions 6") != std::string::npos);

  cluster.create_topic("orders.pillbox-attempts", 4);
  cluster.create_topic("orders.dlq", 6);
  auto fewer = check_kafka_worker_topics(*bootstrap, "orders", false, false);
  REQUIRE_FALSE(fewer.has_value());
  CHECK(fewer.error().find("orders.pillbox-attempts") != std::string::npos);
  CHECK(fewer.error().find("has 4 partitions and orders has 6") != std::string::npos);

  auto no_topic = check_kafka_worker_topics(*bootstrap, "nothing", false, false);
  REQUIRE_FALSE(no_topic.has_value());
  CHECK(no_topic.error().find("topic nothing does not exist") != std::string::npos);
}

TEST_CASE("kafka attempt log: two workers' entries, read from the commit's N, fold into each record's history") {
  MockCluster cluster;
  const auto settings = cluster.topic_and_log("T", 3);
  auto a = writer(settings);
  auto b = writer(settings);

  // Worker a's turn: records 0..3 of partition 1 start together.
  const auto starts = write_all(*a, {attempt_start(1, 0, 1, "a", 1), attempt_start(1, 1, 1, "a", 1),
                                     attempt_start(1, 2, 1, "a", 1), attempt_start(1, 3, 1, "a", 1)});
  CHECK(starts == std::vector<std::int64_t>{0, 1, 2, 3});
  // 0 ran ok and settled; 1 crashed; then a died (2 and 3 never reported back).
  write_all(*a, {attempt_end(1, 0, recorded_outcome(1, "a", 2, Outcome{}, false, false)),
                 attempt_end(1, 1, recorded_outcome(1, "a", 2, crash(), true, false)),
                 attempt_settled(1, 0, 1, "a", 3, {KafkaSettlement::How::kOk, ""})});
  // An entry of another partition lands in its own.
  CHECK(write_all(*a, {attempt_start(2, 0, 1, "a", 1)}) == std::vector<std::int64_t>{0});

  // Worker b takes partition 1 over, the commit at 0 (0's settle not yet committed).
  auto r = reader(settings);
  AttemptLogRead read = read_all(*r, 1, std::nullopt);
  CHECK(read.from == 0);
  CHECK(read.end == 7);
  CHECK(read.entries.size() == 7);
  PartitionAttempts p = fold_attempt_log(1, 0, read.entries, read.end);
  CHECK(p.unreadable == 0);
  CHECK(p.find(0)->settled.has_value());  // skipped, never run again
  CHECK(record_history(*p.find(1)).recorded.size() == 1);
  CHECK(record_history(*p.find(2)).lost == std::vector<std::uint32_t>{1});
  CHECK(record_history(*p.find(2)).last_lost);  // runs alone
  CHECK(next_delivery(*p.find(3)) == 2);

  // b runs 1, 2 and 3 again; 3 is given back (b loses the partition).
  std::vector<AttemptEntry> turn = {attempt_start(1, 1, next_delivery(*p.find(1)), "b", 4),
                                    attempt_start(1, 2, next_delivery(*p.find(2)), "b", 4),
                                    attempt_start(1, 3, next_delivery(*p.find(3)), "b", 4)};
  auto at = write_all(*b, turn);
  for (std::size_t i = 0; i < turn.size(); ++i) p.add(turn[i], at[i]);
  std::vector<AttemptEntry> ends = {attempt_settled(1, 1, 2, "b", 5, {KafkaSettlement::How::kDeadLetter, "T.dlq 1@0"}),
                                    attempt_end(1, 2, recorded_outcome(2, "b", 5, Outcome{}, false, false)),
                                    attempt_settled(1, 2, 2, "b", 5, {KafkaSettlement::How::kOk, ""}),
                                    attempt_end(1, 3, recorded_release(2, "b", 6, "released: partition revoked"))};
  at = write_all(*b, ends);
  for (std::size_t i = 0; i < ends.size(); ++i) p.add(ends[i], at[i]);
  // b commits 3 (0..2 settled): N is 3's first entry, a's start.
  const std::int64_t n = attempt_log_commit_offset(p, 3);
  CHECK(n == 3);
  const auto metadata = parse_attempt_commit_metadata(attempt_commit_metadata(n));

  // A third worker gets partition 1: reads from N, keeps 3 on.
  auto c = reader(settings);
  read = read_all(*c, 1, metadata.from);
  CHECK(read.from == 3);
  CHECK(read.end == 14);
  CHECK(read.note.empty());
  p = fold_attempt_log(1, 3, read.entries, read.end);
  CHECK(p.older > 0);
  REQUIRE(p.records.size() == 1);
  const RecordAttempts& three = p.records.at(3);
  CHECK(next_delivery(three) == 3);
  const EntryHistory h = record_history(three);
  CHECK(h.lost == std::vector<std::uint32_t>{1});  // a died with it; b gave it back uncharged
  CHECK(h.recorded.size() == 1);
  CHECK_FALSE(h.recorded[0].charged);
  CHECK_FALSE(three.settled.has_value());

  // Metadata that is not this log's (an N past its end): read from its beginning, said.
  read = read_all(*c, 1, 1000);
  CHECK(read.from == 0);
  CHECK(read.entries.size() == 14);
  CHECK(read.note.find("read from its beginning") != std::string::npos);
  // An empty partition: nothing, at once.
  read = read_all(*c, 0, std::nullopt);
  CHECK(read.entries.empty());
  CHECK(read.end == 0);
}

TEST_CASE("kafka attempt log: what others wrote to the log is unreadable, and held to a bound while read") {
  MockCluster cluster;
  const auto settings = cluster.topic_and_log("T", 2);
  auto w = writer(settings);
  write_all(*w, {attempt_start(1, 5, 1, "a", 1)});
  produce_raw(settings, "T.pillbox-attempts", 1, "1:5", "{\"v\":1,\"entry\":\"settled\"}");
  produce_raw(settings, "T.pillbox-attempts", 1, "1:5", std::string(500'000, '{'));
  write_all(*w, {attempt_start(1, 5, 2, "b", 2)});
  auto r = reader(settings);
  const AttemptLogRead read = read_all(*r, 1, std::nullopt);
  REQUIRE(read.entries.size() == 4);
  CHECK(read.entries[2].value->size() == kMaxAttemptEntryBytes + 1);  // cut: it was 500 000 bytes
  const PartitionAttempts p = fold_attempt_log(1, 0, read.entries, read.end);
  CHECK(p.unreadable == 2);
  CHECK(p.first_unreadable.starts_with("attempt-log offset 1: "));
  CHECK_FALSE(p.find(5)->settled.has_value());  // the forged settle was not read
  CHECK(next_delivery(*p.find(5)) == 3);
}

TEST_CASE("kafka attempt log: an entry for a partition the log lacks, and a cluster that is down, are errors in time") {
  MockCluster cluster;
  auto settings = cluster.topic_and_log("T", 2);
  settings.timeout = std::chrono::milliseconds(1000);
  // Refused connections said once (not at every try), and tried again soon.
  settings.properties = {{"log_level", "2"}, {"reconnect.backoff.max.ms", "200"}};
  auto w = writer(settings);
  // A producer's first write waits for its producer id and the cluster's
  // metadata, over the 1 s timeout at times on a loaded machine: tried
  // until it lands (a timed-out one may have landed too).
  std::string first = "not tried";
  for (const auto until = Clock::now() + std::chrono::seconds(20); !first.empty() && Clock::now() < until;) {
    first = w->write({attempt_start(0, 0, 1, "a", 1)})[0].error;
  }
  REQUIRE_MESSAGE(first.empty(), first);
  auto written = w->write({attempt_start(7, 0, 1, "a", 1), attempt_start(0, 1, 1, "a", 1)});
  CHECK(written[0].error.find("partition") != std::string::npos);
  CHECK(written[1].error.empty());
  CHECK(written[1].log_offset >= 1);

  auto r = reader(settings);
  cluster.set_down(true);
  auto t = Clock::now();
  written = w->write({attempt_start(0, 2, 1, "a", 1)});
  REQUIRE(written.size() == 1);
  CHECK_FALSE(written[0].error.empty());
  CHECK(ms_since(t) < 5'000);
  t = Clock::now();
  const auto read = r->read(0, std::nullopt);
  CHECK_FALSE(read.has_value());
  CHECK(ms_since(t) < 5'000);
  if (!read) MESSAGE(read.error());
  MESSAGE(written[0].error);
  // Up again: the same writer writes on (its producer is not broken).
  cluster.set_down(false);
  CHECK(w->fatal_error().empty());
  std::string error = "not tried";
  for (const auto until = Clock::now() + std::chrono::seconds(20); !error.empty() && Clock::now() < until;) {
    error = w->write({attempt_start(0, 3, 1, "a", 1)})[0].error;
  }
  CHECK_MESSAGE(error.empty(), error);
}

TEST_CASE("kafka attempt log: a write's round trip and a window's read, measured on the mock") {
  MockCluster cluster;
  const auto settings = cluster.topic_and_log("T", 1);
  auto w = writer(settings);
  std::int64_t offset = 0;
  write_all(*w, {attempt_start(0, offset++, 1, "w", 1)});  // the producer's id, the connections: not measured
  for (const std::size_t batch : {std::size_t{1}, std::size_t{8}, std::size_t{64}}) {
    std::vector<double> times;
    for (int round = 0; round < 21; ++round) {
      std::vector<AttemptEntry> entries;
      for (std::size_t i = 0; i < batch; ++i) entries.push_back(attempt_start(0, offset++, 1, "w", 1));
      const auto t = Clock::now();
      CHECK(write_all(*w, entries).size() == batch);
      times.push_back(ms_since(t));
    }
    std::sort(times.begin(), times.end());
    std::printf("kafka attempt log (mock): a write of %zu entries: median %.2f ms, max %.2f ms\n", batch,
                times[times.size() / 2], times.back());
  }
  // A window of 10 000 entries: ends of 10 000 records, after a failure each.
  const std::int64_t first = offset;
  while (offset < first + 10'000) {
    std::vector<AttemptEntry> entries;
    for (int i = 0; i < 500; ++i, ++offset) {
      entries.push_back(attempt_end(0, offset, recorded_outcome(1, "w", 2, crash(), true, false)));
    }
    write_all(*w, entries);
  }
  auto r = reader(settings);
  auto t = Clock::now();
  const AttemptLogRead read = read_all(*r, 0, first);
  const double read_ms = ms_since(t);
  t = Clock::now();
  const PartitionAttempts p = fold_attempt_log(0, first, read.entries, read.end);
  const double fold_ms = ms_since(t);
  CHECK(read.entries.size() == 10'000);
  CHECK(p.records.size() == 10'000);
  CHECK(p.unreadable == 0);
  std::printf("kafka attempt log (mock): read of a window of 10000 entries: %.1f ms; their fold: %.1f ms\n", read_ms,
              fold_ms);
}

}  // namespace
