// KafkaGroupConsumer (supervisor/broker/kafka_group_consumer.h) against
// librdkafka's mock cluster, started in this process: records as they were
// produced (null and empty keys and values apart, headers), the rebalance
// handlers (a revoke heard before the partitions go to another member; the
// committed offset and its metadata heard on assign), commits with metadata,
// and a partition paused while its buffer is full, until it is down to half.
#include <doctest/doctest.h>
#include <librdkafka/rdkafka.h>
#include <librdkafka/rdkafka_mock.h>
#include <poll.h>

#include <chrono>
#include <functional>
#include <map>
#include <memory>
#include <set>
#include <string>
#include <vector>

#include "supervisor/broker/kafka_group_consumer.h"
#include "supervisor/broker/kafka_producer.h"

namespace pillbox::broker {
namespace {

using Clock = std::chrono::steady_clock;

// A mock cluster of 3 brokers with `topic` of `partitions` partitions.
class MockCluster {
 public:
  MockCluster(const std::string& topic, int partitions) {
    char why[256];
    rk_ = rd_kafka_new(RD_KAFKA_PRODUCER, rd_kafka_conf_new(), why, sizeof why);
    REQUIRE_MESSAGE(rk_ != nullptr, why);
    mock_ = rd_kafka_mock_cluster_new(rk_, 3);
    REQUIRE(mock_ != nullptr);
    REQUIRE(rd_kafka_mock_topic_create(mock_, topic.c_str(), partitions, 3) == RD_KAFKA_RESP_ERR_NO_ERROR);
    bootstrap_ = rd_kafka_mock_cluster_bootstraps(mock_);
  }
  ~MockCluster() {
    if (producer_ != nullptr) rd_kafka_destroy(producer_);
    rd_kafka_mock_cluster_destroy(mock_);
    rd_kafka_destroy(rk_);
  }
  const std::string& bootstrap() const { return bootstrap_; }

  // Produces and waits for every delivery report.
  void produce(const std::string& topic, int partition, const char* key, std::size_t key_size, const char* value,
               std::size_t value_size, const std::vector<std::pair<std::string, std::string>>& headers = {}) {
    char why[256];
    if (producer_ == nullptr) {
      rd_kafka_conf_t* conf = rd_kafka_conf_new();
      REQUIRE(rd_kafka_conf_set(conf, "bootstrap.servers", bootstrap_.c_str(), why, sizeof why) == RD_KAFKA_CONF_OK);
      producer_ = rd_kafka_new(RD_KAFKA_PRODUCER, conf, why, sizeof why);
      REQUIRE(producer_ != nullptr);
    }
    rd_kafka_headers_t* hs = rd_kafka_headers_new(headers.size());
    for (const auto& [name, value] : headers) {
      rd_kafka_header_add(hs, name.data(), static_cast<ssize_t>(name.size()), value.data(),
                          static_cast<ssize_t>(value.size()));
    }
    REQUIRE(rd_kafka_producev(producer_, RD_KAFKA_V_TOPIC(topic.c_str()), RD_KAFKA_V_PARTITION(partition),
                              RD_KAFKA_V_KEY(key, key_size), RD_KAFKA_V_VALUE(const_cast<char*>(value), value_size),
                              RD_KAFKA_V_MSGFLAGS(RD_KAFKA_MSG_F_COPY), RD_KAFKA_V_HEADERS(hs),
                              RD_KAFKA_V_END) == RD_KAFKA_RESP_ERR_NO_ERROR);
    REQUIRE(rd_kafka_flush(producer_, 10000) == RD_KAFKA_RESP_ERR_NO_ERROR);
  }
  MockCluster(const MockCluster&) = delete;
  MockCluster& operator=(const MockCluster&) = delete;

 private:
  rd_kafka_t* producer_ = nullptr;

  rd_kafka_t* rk_ = nullptr;
  rd_kafka_mock_cluster_t* mock_ = nullptr;
  std::string bootstrap_;
};

struct Heard {
  std::vector<std::vector<std::int32_t>> revoked;
  std::vector<std::map<std::int32_t, KafkaCommitted>> assigned;
  std::vector<Status> commits;
  std::vector<std::string> notices;
};

std::unique_ptr<KafkaGroupConsumer> open_consumer(
    const MockCluster& mock, const std::string& topic, Heard& heard, std::size_t max_buffered = 64,
    std::set<std::int32_t> start_paused = {}, const std::vector<std::pair<std::string, std::string>>& extra = {},
    std::size_t max_buffered_bytes = 32u << 20) {
  KafkaConsumerSettings s;
  s.max_buffered_bytes = max_buffered_bytes;
  s.properties = {{"bootstrap.servers", mock.bootstrap()}, {"session.timeout.ms", "6000"},
                  {"heartbeat.interval.ms", "500"}};
  s.properties.insert(s.properties.end(), extra.begin(), extra.end());
  s.topic = topic;
  s.group = "workers";
  s.max_buffered = max_buffered;
  KafkaGroupConsumer::Handlers h;
  h.on_revoke = [&heard](const std::vector<std::int32_t>& p) { heard.revoked.push_back(p); };
  h.on_assign = [&heard, start_paused](const std::map<std::int32_t, KafkaCommitted>& p) {
    heard.assigned.push_back(p);
    return start_paused;
  };
  h.on_committed = [&heard](const Status& st) { heard.commits.push_back(st); };
  h.on_notice = [&heard](const std::string& what) { heard.notices.push_back(what); };
  auto c = KafkaGroupConsumer::open(std::move(s), std::move(h));
  REQUIRE_MESSAGE(c.has_value(), (c.has_value() ? "" : c.error()));
  return std::move(*c);
}

// Waits on the consumers' fds and pumps them until `done`, at most `limit`.
bool pump_until(const std::vector<KafkaGroupConsumer*>& consumers, const std::function<bool()>& done,
                std::chrono::seconds limit = std::chrono::seconds(30)) {
  const auto until = Clock::now() + limit;
  while (!done()) {
    if (Clock::now() > until) return false;
    std::vector<pollfd> fds;
    for (KafkaGroupConsumer* c : consumers) fds.push_back({c->wait_fd(), POLLIN, 0});
    ::poll(fds.data(), fds.size(), 200);
    for (KafkaGroupConsumer* c : consumers) c->pump();
  }
  return true;
}

TEST_CASE("kafka consumer: records come as produced, null and empty told apart, headers kept") {
  MockCluster mock("tasks", 2);
  mock.produce("tasks", 0, "k1", 2, "v1", 2, {{"h", "x"}, {"h", "y"}});
  mock.produce("tasks", 0, nullptr, 0, nullptr, 0);
  mock.produce("tasks", 1, "", 0, "", 0);
  const char binary[] = {'a', '\0', 'b'};
  mock.produce("tasks", 1, binary, 3, binary, 3);
  Heard heard;
  auto c = open_consumer(mock, "tasks", heard);
  std::vector<KafkaMessage> got;
  REQUIRE(pump_until({c.get()}, [&] {
    while (auto m = c->next()) got.push_back(std::move(*m));
    return got.size() == 4;
  }));
  REQUIRE(heard.assigned.size() == 1);
  CHECK(heard.assigned[0].size() == 2);
  CHECK(heard.assigned[0].at(0).offset == kNoCommittedOffset);
  CHECK(heard.assigned[0].at(0).known);
  std::map<std::pair<int, std::int64_t>, KafkaMessage> at;
  for (auto& m : got) at[{m.partition, m.offset}] = m;
  CHECK(at.at({0, 0}).key == std::optional<std::string>("k1"));
  CHECK(at.at({0, 0}).headers.size() == 2);
  CHECK(at.at({0, 0}).headers[1].second == std::optional<std::string>("y"));
  CHECK_FALSE(at.at({0, 1}).key.has_value());
  CHECK_FALSE(at.at({0, 1}).value.has_value());
  CHECK(at.at({1, 0}).key == std::optional<std::string>(""));
  CHECK(at.at({1, 0}).value == std::optional<std::string>(""));
  CHECK(at.at({1, 1}).value == std::optional<std::string>(std::string(binary, 3)));
  CHECK(at.at({1, 1}).topic == "tasks");
  const auto marks = c->watermarks(1);
  REQUIRE(marks.has_value());
  CHECK(marks->second == 2);
}

TEST_CASE("kafka consumer: a commit's metadata reaches the next owner; its revoke comes first") {
  MockCluster mock("tasks", 4);
  for (int p = 0; p < 4; ++p) mock.produce("tasks", p, "k", 1, "v", 1);
  Heard a_heard;
  auto a = open_consumer(mock, "tasks", a_heard);
  std::size_t taken = 0;
  REQUIRE(pump_until({a.get()}, [&] {
    while (a->next()) ++taken;
    return taken == 4;
  }));
  REQUIRE(a->commit({{0, {1, "pillbox-attempts@7"}}, {2, {1, ""}}}));
  REQUIRE(pump_until({a.get()}, [&] { return !a_heard.commits.empty(); }));
  CHECK(a_heard.commits[0].is_ok());
  const auto again = a->read_committed(0);
  REQUIRE(again.has_value());
  CHECK(again->offset == 1);
  CHECK(again->metadata == "pillbox-attempts@7");

  // A second member: the first gives up everything (eager), then each gets a share.
  Heard b_heard;
  auto b = open_consumer(mock, "tasks", b_heard);
  // Done once the two hold all four between them, none twice.
  REQUIRE(pump_until({a.get(), b.get()}, [&] {
    if (a_heard.assigned.size() < 2 || b_heard.assigned.empty()) return false;
    std::set<std::int32_t> both(a->assignment().begin(), a->assignment().end());
    both.insert(b->assignment().begin(), b->assignment().end());
    return both.size() == 4 && a->assignment().size() + b->assignment().size() == 4;
  }));
  // The first thing a heard was the revoke of everything it had (the
  // mock may rebalance again once the second member's join settles).
  REQUIRE_FALSE(a_heard.revoked.empty());
  CHECK(a_heard.revoked[0] == std::vector<std::int32_t>{0, 1, 2, 3});
  std::map<std::int32_t, KafkaCommitted> all = a_heard.assigned.back();
  for (const auto& [p, c] : b_heard.assigned.back()) all[p] = c;
  REQUIRE(all.size() == 4);
  CHECK(all.at(0).offset == 1);
  CHECK(all.at(0).metadata == "pillbox-attempts@7");
  CHECK(all.at(1).offset == kNoCommittedOffset);
  CHECK(all.at(2).offset == 1);
  CHECK(all.at(2).metadata.empty());
  // Nothing committed is read again: partitions 1 and 3 start at 0 (none
  // committed), 0 and 2 at 1, where nothing is.
  std::size_t again_taken = 0;
  pump_until({a.get(), b.get()}, [&] {
    while (a->next()) ++again_taken;
    while (b->next()) ++again_taken;
    return false;
  }, std::chrono::seconds(3));
  CHECK(again_taken == 2);
}

TEST_CASE("kafka consumer: a full buffer pauses its partition until taken down to half, nothing lost; a caller's pause holds records back") {
  MockCluster mock("tasks", 1);
  constexpr int kRecords = 200;
  for (int i = 0; i < kRecords; ++i) {
    const std::string v = std::to_string(i);
    mock.produce("tasks", 0, "k", 1, v.data(), v.size());
  }
  Heard heard;
  // Fetches of about 1 KiB (a dozen of these records): a partition that
  // is not paused comes whole within a second.
  auto c = open_consumer(mock, "tasks", heard, 8, {0}, {{"max.partition.fetch.bytes", "1024"}});
  // Paused from its assign: nothing comes out.
  pump_until({c.get()}, [&] { return false; }, std::chrono::seconds(4));
  REQUIRE(heard.assigned.size() == 1);
  CHECK_FALSE(c->next().has_value());
  CHECK(c->buffered() == 0);
  c->resume(0);
  // Nothing taken: the buffer fills and the partition is paused, and stays
  // paused (librdkafka fetches none of the rest: at most what was on its
  // way when the pause came).
  REQUIRE(pump_until({c.get()}, [&] { return c->buffered() >= 8; }));
  CHECK_FALSE(c->fetching(0));
  pump_until({c.get()}, [&] { return false; }, std::chrono::seconds(3));
  const std::size_t held = c->buffered();
  CHECK(held >= 8);
  CHECK(held < 60);
  CHECK_FALSE(c->fetching(0));
  // Taken down: still paused until half of the 8 is left, then fetched again.
  std::vector<std::string> values;
  while (c->buffered() > 4) {
    CHECK_FALSE(c->fetching(0));
    values.push_back(*c->next()->value);
  }
  CHECK(c->fetching(0));
  REQUIRE(pump_until({c.get()}, [&] {
    if (auto m = c->next()) values.push_back(*m->value);
    CHECK(c->buffered() < 60);
    return values.size() == kRecords;
  }));
  for (int i = 0; i < kRecords; ++i) CHECK(values[static_cast<std::size_t>(i)] == std::to_string(i));
}

TEST_CASE("kafka consumer: large records pause their partition by bytes, long before its record count") {
  MockCluster mock("big", 1);
  constexpr int kRecords = 30;
  for (int i = 0; i < kRecords; ++i) {
    const std::string v = std::to_string(i) + ":" + std::string(64u << 10, 'x');
    mock.produce("big", 0, "k", 1, v.data(), v.size());
  }
  Heard heard;
  // 512 records allowed, 256 KiB: 4 of these. Fetches of one or two.
  auto c = open_consumer(mock, "big", heard, 512, {}, {{"max.partition.fetch.bytes", "100000"}}, 256u << 10);
  REQUIRE(pump_until({c.get()}, [&] { return c->buffered() >= 4; }));
  pump_until({c.get()}, [&] { return false; }, std::chrono::seconds(3));
  CHECK(c->buffered() < 10);
  CHECK_FALSE(c->fetching(0));
  std::vector<std::string> values;
  REQUIRE(pump_until({c.get()}, [&] {
    if (auto m = c->next()) values.push_back(m->value->substr(0, m->value->find(':')));
    CHECK(c->buffered() < 10);
    return values.size() == kRecords;
  }));
  for (int i = 0; i < kRecords; ++i) CHECK(values[static_cast<std::size_t>(i)] == std::to_string(i));
}

TEST_CASE("kafka producer: reports come through its fd with their offsets; what it wrote reads back exact") {
  MockCluster mock("log", 3);
  auto producer = KafkaProducer::open({{"bootstrap.servers", mock.bootstrap()}});
  REQUIRE_MESSAGE(producer.has_value(), (producer.has_value() ? "" : producer.error()));
  KafkaProducer& p = **producer;
  std::vector<KafkaDelivered> reports;
  for (int i = 0; i < 5; ++i) {
    KafkaOutgoing m;
    m.topic = "log";
    m.partition = 2;
    if (i != 1) m.key = "k" + std::to_string(i);
    if (i != 2) m.value = std::string("v\0") + std::to_string(i);
    m.headers = {{"pillbox.dedupe", std::string("log/2@") + std::to_string(i)}, {"empty", std::nullopt}};
    REQUIRE(p.produce(m, [&reports](const Expected<KafkaDelivered>& d) {
      REQUIRE(d.has_value());
      reports.push_back(*d);
    }));
  }
  CHECK(p.outstanding() == 5);
  const auto until = Clock::now() + std::chrono::seconds(20);
  while (reports.size() < 5 && Clock::now() < until) {
    pollfd fd{p.wait_fd(), POLLIN, 0};
    ::poll(&fd, 1, 500);
    p.drain();
  }
  REQUIRE(reports.size() == 5);
  CHECK(p.outstanding() == 0);
  for (std::size_t i = 0; i < reports.size(); ++i) {
    CHECK(reports[i].partition == 2);
    CHECK(reports[i].offset == static_cast<std::int64_t>(i));  // in order: idempotent
  }
  // Refused at once: larger than what the producer may send.
  KafkaOutgoing big;
  big.topic = "log";
  big.value = std::string(2u << 20, 'x');
  bool ran = false;
  CHECK_FALSE(p.produce(big, [&ran](const Expected<KafkaDelivered>&) { ran = true; }));

  Heard heard;
  auto c = open_consumer(mock, "log", heard);
  std::vector<KafkaMessage> got;
  REQUIRE(pump_until({c.get()}, [&] {
    while (auto m = c->next()) got.push_back(std::move(*m));
    return got.size() == 5;
  }));
  for (const KafkaMessage& m : got) {
    const auto i = m.offset;
    CHECK(m.key.has_value() == (i != 1));
    CHECK(m.value.has_value() == (i != 2));
    if (i != 2) CHECK(*m.value == std::string("v\0") + std::to_string(i));
    REQUIRE(m.headers.size() == 2);
    CHECK(m.headers[0].second == std::optional<std::string>(std::string("log/2@") + std::to_string(i)));
    CHECK_FALSE(m.headers[1].second.has_value());
  }
  CHECK_FALSE(ran);
}

}  // namespace
}  // namespace pillbox::broker
