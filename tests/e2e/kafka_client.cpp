#include "tests/e2e/kafka_client.h"

#include <doctest/doctest.h>
#include <librdkafka/rdkafka.h>
#include <librdkafka/rdkafkacpp.h>

#include <chrono>
#include <cstdlib>
#include <cstring>
#include <map>
#include <memory>
#include <set>

#include "supervisor/broker/kafka_config.h"
#include "supervisor/broker/kafka_record_fit.h"

namespace e2e {
namespace {

using pillbox::broker::KafkaEvents;

constexpr int kTimeoutMs = 10000;

std::unique_ptr<RdKafka::Conf> test_conf(const std::string& bootstrap, KafkaEvents& events) {
  auto parsed = pillbox::broker::parse_kafka_bootstrap(bootstrap);
  REQUIRE_MESSAGE(parsed.has_value(), (parsed ? "" : parsed.error()));
  auto conf = pillbox::broker::kafka_conf(*parsed, "pillbox-e2e", events);
  REQUIRE_MESSAGE(conf.has_value(), (conf ? "" : conf.error()));
  return std::move(*conf);
}

void set(RdKafka::Conf& conf, const std::string& name, const std::string& value) {
  auto s = pillbox::broker::kafka_set(conf, name, value);
  REQUIRE_MESSAGE(s.is_ok(), s.message());
}

// The partition count of `topic` from an all-topics request (one that
// names a topic creates it on the mock); 0 when it is not there.
int partitions_of(RdKafka::Handle& client, const std::string& topic, const KafkaEvents& events) {
  RdKafka::Metadata* raw = nullptr;
  const auto err = client.metadata(true, nullptr, &raw, kTimeoutMs);
  std::unique_ptr<RdKafka::Metadata> metadata(raw);
  REQUIRE_MESSAGE(err == RdKafka::ERR_NO_ERROR,
                  "Kafka metadata: " << RdKafka::err2str(err) << " (" << events.last_error() << ")");
  for (const auto* t : *metadata->topics()) {
    if (t->topic() == topic) return static_cast<int>(t->partitions()->size());
  }
  return 0;
}

std::optional<std::string> bytes_of(const void* data, std::size_t size) {
  if (data == nullptr) return std::nullopt;
  return std::string(static_cast<const char*>(data), size);
}

}  // namespace

std::optional<std::string> KafkaRecord::header(const std::string& name) const {
  for (const auto& [n, v] : headers) {
    if (n == name) return v;
  }
  return std::nullopt;
}

int topic_partitions(const std::string& bootstrap, const std::string& topic) {
  KafkaEvents events;
  auto conf = test_conf(bootstrap, events);
  std::string why;
  std::unique_ptr<RdKafka::Producer> client(RdKafka::Producer::create(conf.get(), why));
  REQUIRE_MESSAGE(client, why);
  return partitions_of(*client, topic, events);
}

std::vector<KafkaRecord> read_topic(const std::string& bootstrap, const std::string& topic) {
  KafkaEvents events;
  auto conf = test_conf(bootstrap, events);
  // The legacy (simple) consumer: partitions started by hand, no group.id,
  // so no group is joined and no offset committed.
  set(*conf, "enable.partition.eof", "true");
  std::string why;
  std::unique_ptr<RdKafka::Consumer> consumer(RdKafka::Consumer::create(conf.get(), why));
  REQUIRE_MESSAGE(consumer, why);
  const int partitions = partitions_of(*consumer, topic, events);
  REQUIRE_MESSAGE(partitions > 0, "no topic " << topic << " on Kafka at " << bootstrap);
  std::unique_ptr<RdKafka::Conf> topic_conf(RdKafka::Conf::create(RdKafka::Conf::CONF_TOPIC));
  set(*topic_conf, "auto.commit.enable", "false");
  std::unique_ptr<RdKafka::Topic> handle(RdKafka::Topic::create(consumer.get(), topic, topic_conf.get(), why));
  REQUIRE_MESSAGE(handle, why);
  std::unique_ptr<RdKafka::Queue> queue(RdKafka::Queue::create(consumer.get()));

  // Each partition is read up to its end as it is now (the high
  // watermark); an empty one is not read at all.
  std::set<int32_t> reading;
  for (int32_t p = 0; p < partitions; ++p) {
    int64_t low = 0, high = 0;
    const auto err = consumer->query_watermark_offsets(topic, p, &low, &high, kTimeoutMs);
    REQUIRE_MESSAGE(err == RdKafka::ERR_NO_ERROR, topic << " [" << p << "] watermarks: " << RdKafka::err2str(err));
    if (high <= low) continue;
    REQUIRE(consumer->start(handle.get(), p, RdKafka::Topic::OFFSET_BEGINNING, queue.get()) == RdKafka::ERR_NO_ERROR);
    reading.insert(p);
  }
  std::map<int32_t, std::vector<KafkaRecord>> by_partition;
  const std::set<int32_t> started = reading;
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(60);
  while (!reading.empty()) {
    REQUIRE_MESSAGE(std::chrono::steady_clock::now() < deadline,
                    "reading " << topic << ": " << reading.size() << " partitions not at their end after 60 s ("
                               << events.last_error() << ")");
    std::unique_ptr<RdKafka::Message> m(consumer->consume(queue.get(), 1000));
    if (!m || m->err() == RdKafka::ERR__TIMED_OUT) continue;
    if (m->err() == RdKafka::ERR__PARTITION_EOF) {
      reading.erase(m->partition());
      continue;
    }
    REQUIRE_MESSAGE(m->err() == RdKafka::ERR_NO_ERROR, "reading " << topic << ": " << m->errstr());
    KafkaRecord r;
    r.key = bytes_of(m->key_pointer(), m->key_len());
    r.value = bytes_of(m->payload(), m->len());
    r.partition = m->partition();
    r.offset = m->offset();
    if (RdKafka::Headers* h = m->headers()) {
      for (const auto& header : h->get_all()) {
        r.headers.emplace_back(header.key(),
                               header.value() ? std::string(static_cast<const char*>(header.value()), header.value_size())
                                              : std::string());
      }
    }
    by_partition[r.partition].push_back(std::move(r));
  }
  for (int32_t p : started) consumer->stop(handle.get(), p);
  std::vector<KafkaRecord> all;
  for (auto& [p, records] : by_partition) {
    for (auto& r : records) all.push_back(std::move(r));
  }
  return all;
}

std::vector<std::pair<int32_t, int64_t>> produce(const std::string& bootstrap, const std::string& topic,
                                                 const std::vector<KafkaOutgoing>& records) {
  struct Report : RdKafka::DeliveryReportCb {
    std::vector<std::pair<int32_t, int64_t>> at;
    std::vector<std::string> errors;
    std::size_t reported = 0;
    void dr_cb(RdKafka::Message& m) override {
      const auto i = reinterpret_cast<std::size_t>(m.msg_opaque());
      ++reported;
      if (m.err() != RdKafka::ERR_NO_ERROR) {
        errors.push_back(m.errstr());
        return;
      }
      at[i] = {m.partition(), m.offset()};
    }
  } report;
  report.at.resize(records.size(), {-1, -1});
  KafkaEvents events;
  auto conf = test_conf(bootstrap, events);
  set(*conf, "enable.idempotence", "true");
  set(*conf, "partitioner", "murmur2_random");
  set(*conf, "message.timeout.ms", "30000");
  // As a producer may: records up to what a default broker takes, past
  // librdkafka's own default (1000000).
  set(*conf, "message.max.bytes", std::to_string(pillbox::broker::kKafkaBrokerMessageMaxBytes));
  std::string why;
  REQUIRE(conf->set("dr_cb", static_cast<RdKafka::DeliveryReportCb*>(&report), why) == RdKafka::Conf::CONF_OK);
  std::unique_ptr<RdKafka::Producer> producer(RdKafka::Producer::create(conf.get(), why));
  REQUIRE_MESSAGE(producer, why);
  REQUIRE_MESSAGE(partitions_of(*producer, topic, events) > 0, "no topic " << topic << " on Kafka at " << bootstrap);
  for (std::size_t i = 0; i < records.size(); ++i) {
    const KafkaOutgoing& r = records[i];
    RdKafka::Headers* headers = RdKafka::Headers::create();
    for (const auto& [n, v] : r.headers) headers->add(n, v);
    const auto err = producer->produce(
        topic, r.partition.value_or(RdKafka::Topic::PARTITION_UA), RdKafka::Producer::RK_MSG_COPY,
        r.value ? const_cast<char*>(r.value->data()) : nullptr, r.value ? r.value->size() : 0,
        r.key ? r.key->data() : nullptr, r.key ? r.key->size() : 0, 0, headers, reinterpret_cast<void*>(i));
    if (err != RdKafka::ERR_NO_ERROR) delete headers;
    REQUIRE_MESSAGE(err == RdKafka::ERR_NO_ERROR, "produce to " << topic << ": " << RdKafka::err2str(err));
  }
  REQUIRE_MESSAGE(producer->flush(60000) == RdKafka::ERR_NO_ERROR,
                  "records to " << topic << " not acknowledged within 60 s (" << events.last_error() << ")");
  REQUIRE_MESSAGE(report.errors.empty(), "produce to " << topic << ": " << (report.errors.empty() ? "" : report.errors.front()));
  REQUIRE(report.reported == records.size());
  return report.at;
}

KafkaGroupProgress group_progress(const std::string& bootstrap, const std::string& topic, const std::string& group) {
  KafkaEvents events;
  auto conf = test_conf(bootstrap, events);
  set(*conf, "group.id", group);
  set(*conf, "enable.auto.commit", "false");
  std::string why;
  // Never subscribes: committed() asks the group's coordinator without joining.
  std::unique_ptr<RdKafka::KafkaConsumer> c(RdKafka::KafkaConsumer::create(conf.get(), why));
  REQUIRE_MESSAGE(c != nullptr, why);
  const int n = partitions_of(*c, topic, events);
  REQUIRE_MESSAGE(n > 0, "no topic " << topic);
  std::vector<RdKafka::TopicPartition*> parts;
  for (int p = 0; p < n; ++p) parts.push_back(RdKafka::TopicPartition::create(topic, p));
  const auto err = c->committed(parts, kTimeoutMs);
  KafkaGroupProgress out;
  for (RdKafka::TopicPartition* tp : parts) {
    REQUIRE_MESSAGE(err == RdKafka::ERR_NO_ERROR, "committed(): " << RdKafka::err2str(err));
    out.committed[tp->partition()] = tp->offset();
    int64_t low = 0, high = 0;
    REQUIRE(c->query_watermark_offsets(topic, tp->partition(), &low, &high, kTimeoutMs) == RdKafka::ERR_NO_ERROR);
    out.end[tp->partition()] = high;
  }
  RdKafka::TopicPartition::destroy(parts);
  c->close();
  return out;
}

void check_all_committed(const std::string& bootstrap, const std::string& topic, const std::string& group) {
  const auto progress = group_progress(bootstrap, topic, group);
  for (const auto& [partition, end] : progress.end) {
    const int p = partition;
    CAPTURE(p);
    CHECK(progress.committed.at(p) == end);
  }
}

void commit_offsets(const std::string& bootstrap, const std::string& topic, const std::string& group,
                    const std::map<int32_t, KafkaCommit>& offsets) {
  KafkaEvents events;
  auto conf = test_conf(bootstrap, events);
  set(*conf, "group.id", group);
  set(*conf, "enable.auto.commit", "false");
  set(*conf, "session.timeout.ms", "6000");  // as the workers': a member that did not leave is gone after it
  std::string why;
  std::unique_ptr<RdKafka::KafkaConsumer> c(RdKafka::KafkaConsumer::create(conf.get(), why));
  REQUIRE_MESSAGE(c != nullptr, why);
  // A member of the group (the mock takes commits from its members only),
  // once it has its share.
  REQUIRE(c->subscribe({topic}) == RdKafka::ERR_NO_ERROR);
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(60);
  for (bool assigned = false; !assigned;) {
    REQUIRE_MESSAGE(std::chrono::steady_clock::now() < deadline, "no partition of " << topic << " within 60 s");
    delete c->consume(100);
    std::vector<RdKafka::TopicPartition*> partitions;
    REQUIRE(c->assignment(partitions) == RdKafka::ERR_NO_ERROR);
    assigned = !partitions.empty();
    RdKafka::TopicPartition::destroy(partitions);
  }
  // The C API: librdkafka 2.0.2's C++ API commits no metadata.
  rd_kafka_topic_partition_list_t* list = rd_kafka_topic_partition_list_new(static_cast<int>(offsets.size()));
  for (const auto& [partition, commit] : offsets) {
    rd_kafka_topic_partition_t* p = rd_kafka_topic_partition_list_add(list, topic.c_str(), partition);
    p->offset = commit.offset;
    if (!commit.metadata.empty()) {
      p->metadata = std::malloc(commit.metadata.size());  // the list frees it
      std::memcpy(p->metadata, commit.metadata.data(), commit.metadata.size());
      p->metadata_size = commit.metadata.size();
    }
  }
  const rd_kafka_resp_err_t err = rd_kafka_commit(c->c_ptr(), list, 0);
  rd_kafka_topic_partition_list_destroy(list);
  c->close();
  REQUIRE_MESSAGE(err == RD_KAFKA_RESP_ERR_NO_ERROR,
                  "commit for group " << group << ": " << std::string(rd_kafka_err2str(err)));
}

}  // namespace e2e
