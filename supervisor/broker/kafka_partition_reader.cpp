#include "supervisor/broker/kafka_partition_reader.h"

#include <librdkafka/rdkafkacpp.h>

#include <algorithm>
#include <vector>

namespace pillbox::broker {
namespace {

using Clock = std::chrono::steady_clock;

KafkaMessage message_of(const std::string& topic, std::int32_t partition, RdKafka::Message& m,
                        std::size_t max_value) {
  KafkaMessage out;
  out.topic = topic;
  out.partition = partition;
  out.offset = m.offset();
  // A null key or value stays null (librdkafka gives no pointer for one).
  if (m.key_pointer() != nullptr) out.key.emplace(static_cast<const char*>(m.key_pointer()), m.key_len());
  if (m.payload() != nullptr) out.value.emplace(static_cast<const char*>(m.payload()), std::min(m.len(), max_value));
  out.value_size = m.len();
  const RdKafka::MessageTimestamp ts = m.timestamp();
  out.timestamp_ms = ts.type == RdKafka::MessageTimestamp::MSG_TIMESTAMP_NOT_AVAILABLE ? -1 : ts.timestamp;
  if (RdKafka::Headers* headers = m.headers(); headers != nullptr) {
    for (const RdKafka::Headers::Header& h : headers->get_all()) {
      if (h.value() == nullptr) {
        out.headers.emplace_back(h.key(), std::nullopt);
      } else {
        out.headers.emplace_back(h.key(), std::string(static_cast<const char*>(h.value()), h.value_size()));
      }
    }
  }
  return out;
}

}  // namespace

Expected<std::unique_ptr<KafkaPartitionReader>> KafkaPartitionReader::open(const KafkaBootstrap& bootstrap,
                                                                          const std::string& client_id,
                                                                          std::chrono::milliseconds timeout) {
  return open(kafka_properties(bootstrap, client_id), bootstrap, timeout);
}

Expected<std::unique_ptr<KafkaPartitionReader>> KafkaPartitionReader::open(const KafkaProperties& properties,
                                                                          const KafkaBootstrap& bootstrap,
                                                                          std::chrono::milliseconds timeout) {
  std::unique_ptr<KafkaPartitionReader> self(new KafkaPartitionReader());
  self->bootstrap_ = bootstrap;
  self->timeout_ = timeout;
  std::unique_ptr<RdKafka::Conf> conf(RdKafka::Conf::create(RdKafka::Conf::CONF_GLOBAL));
  std::string why;
  if (conf->set("event_cb", &self->events_, why) != RdKafka::Conf::CONF_OK) {
    return Error{"librdkafka refused the event callback: " + why};
  }
  // librdkafka's consumer wants a group id; assign() never joins the group
  // and nothing is committed to it.
  KafkaProperties all = properties;
  all.insert(all.end(), {{"group.id", "pillbox-reader"},
                         {"enable.auto.commit", "false"},
                         {"enable.auto.offset.store", "false"},
                         {"enable.partition.eof", "true"},
                         {"isolation.level", "read_uncommitted"},
                         {"auto.offset.reset", "earliest"},
                         {"allow.auto.create.topics", "false"}});
  for (const auto& [name, value] : all) {
    if (auto s = kafka_set(*conf, name, value); !s) return Error{s.message()};
  }
  self->consumer_.reset(RdKafka::KafkaConsumer::create(conf.get(), why));
  if (!self->consumer_) return Error{"cannot make a Kafka consumer for " + bootstrap.joined() + ": " + why};
  return self;
}

KafkaPartitionReader::~KafkaPartitionReader() {
  if (consumer_) consumer_->close();
}

Expected<int> KafkaPartitionReader::partitions(const std::string& topic) {
  RdKafka::Metadata* raw = nullptr;
  const auto err = consumer_->metadata(true, nullptr, &raw, static_cast<int>(timeout_.count()));
  std::unique_ptr<RdKafka::Metadata> metadata(raw);
  if (err != RdKafka::ERR_NO_ERROR) return Error{kafka_unreachable(bootstrap_, events_, err), ErrorCode::kSetup};
  for (const RdKafka::TopicMetadata* t : *metadata->topics()) {
    if (t->topic() != topic) continue;
    if (t->err() != RdKafka::ERR_NO_ERROR && t->err() != RdKafka::ERR_LEADER_NOT_AVAILABLE) {
      return Error{"Kafka at " + bootstrap_.joined() + " answered for topic " + topic + ": " +
                       RdKafka::err2str(t->err()),
                   ErrorCode::kSetup};
    }
    return static_cast<int>(t->partitions()->size());
  }
  return 0;
}

Expected<KafkaWatermarks> KafkaPartitionReader::watermarks(const std::string& topic, std::int32_t partition) {
  KafkaWatermarks w;
  const auto err =
      consumer_->query_watermark_offsets(topic, partition, &w.low, &w.high, static_cast<int>(timeout_.count()));
  if (err != RdKafka::ERR_NO_ERROR) {
    return Error{"cannot read where partition " + std::to_string(partition) + " of " + topic +
                     " ends on the Kafka cluster at " + bootstrap_.joined() + ": " + RdKafka::err2str(err),
                 ErrorCode::kSetup};
  }
  return w;
}

Status KafkaPartitionReader::read(const std::string& topic, std::int32_t partition, std::int64_t from,
                                  std::int64_t to, const std::function<bool(KafkaMessage&&)>& fn,
                                  std::size_t max_value) {
  if (from >= to) return Status::ok();
  const auto deadline = Clock::now() + timeout_;
  const std::string where = "partition " + std::to_string(partition) + " of " + topic;
  std::vector<RdKafka::TopicPartition*> assignment{RdKafka::TopicPartition::create(topic, partition, from)};
  const auto assigned = consumer_->assign(assignment);
  RdKafka::TopicPartition::destroy(assignment);
  if (assigned != RdKafka::ERR_NO_ERROR) {
    return Status::error("cannot read " + where + ": " + RdKafka::err2str(assigned), ErrorCode::kSetup);
  }
  std::int64_t next = from;  // offsets rise; one handed over twice is skipped
  std::string last_error;
  bool stopped = false;
  while (next < to && !stopped && Clock::now() < deadline) {
    std::unique_ptr<RdKafka::Message> m(consumer_->consume(std::min(kafka_remaining_ms(deadline), 100)));
    if (m->err() == RdKafka::ERR__TIMED_OUT) continue;
    if (m->err() == RdKafka::ERR__PARTITION_EOF) {
      next = std::max(next, m->offset());  // the end as the fetch saw it: nothing more below it
      continue;
    }
    if (m->err() != RdKafka::ERR_NO_ERROR) {
      last_error = m->errstr();
      if (m->err() == RdKafka::ERR_UNKNOWN_TOPIC_OR_PART || m->err() == RdKafka::ERR_TOPIC_AUTHORIZATION_FAILED) break;
      continue;  // librdkafka retries what it can; the deadline bounds it
    }
    if (m->offset() < next || m->offset() >= to) continue;
    next = m->offset() + 1;
    stopped = !fn(message_of(topic, partition, *m, max_value));
  }
  consumer_->unassign();
  if (!stopped && next < to) {
    return Status::error("the read of " + where + " stopped at offset " + std::to_string(next) + " of " +
                             std::to_string(from) + ".." + std::to_string(to) +
                             (last_error.empty() ? " when its time ran out" : ": " + last_error) +
                             ": the Kafka cluster at " + bootstrap_.joined() + " is slow or unreachable",
                         ErrorCode::kSetup);
  }
  return Status::ok();
}

}  // namespace pillbox::broker
