#include "supervisor/broker/kafka_attempt_log.h"

#include <librdkafka/rdkafkacpp.h>

#include <algorithm>
#include <cstdint>
#include <map>

namespace pillbox::broker {
namespace {

using Clock = std::chrono::steady_clock;

int remaining_ms(Clock::time_point deadline) {
  const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now()).count();
  return static_cast<int>(std::clamp<std::int64_t>(left, 0, 1'000'000'000));
}

// A librdkafka client's configuration: the user's properties first, then
// those the attempt log relies on (which win).
Expected<std::unique_ptr<RdKafka::Conf>> client_conf(const AttemptLogSettings& settings,
                                                     const std::vector<std::pair<std::string, std::string>>& own) {
  std::unique_ptr<RdKafka::Conf> conf(RdKafka::Conf::create(RdKafka::Conf::CONF_GLOBAL));
  std::string errstr;
  auto set = [&](const std::string& name, const std::string& value) {
    if (conf->set(name, value, errstr) == RdKafka::Conf::CONF_OK) return true;
    errstr = "librdkafka property " + name + "=" + value + ": " + errstr;
    return false;
  };
  for (const auto& [name, value] : settings.properties) {
    if (!set(name, value)) return Error{errstr};
  }
  if (!set("bootstrap.servers", settings.brokers) || !set("client.id", "pillbox-attempt-log")) return Error{errstr};
  // librdkafka's log lines stay off stderr (the calls here say their errors).
  if (!set("log_level", "0")) return Error{errstr};
  for (const auto& [name, value] : own) {
    if (!set(name, value)) return Error{errstr};
  }
  return conf;
}

}  // namespace

AttemptLogReader::AttemptLogReader(AttemptLogSettings settings, std::unique_ptr<RdKafka::KafkaConsumer> consumer)
    : settings_(std::move(settings)), consumer_(std::move(consumer)) {}

AttemptLogReader::~AttemptLogReader() {
  if (consumer_) consumer_->close();
}

Expected<std::unique_ptr<AttemptLogReader>> AttemptLogReader::open(const AttemptLogSettings& settings) {
  // librdkafka's KafkaConsumer wants a group.id; assign() never joins it,
  // and nothing is committed to it.
  auto conf = client_conf(settings, {{"group.id", "pillbox-attempt-log-reader"},
                                     {"enable.auto.commit", "false"},
                                     {"enable.auto.offset.store", "false"},
                                     {"enable.partition.eof", "true"},
                                     {"isolation.level", "read_uncommitted"},
                                     {"auto.offset.reset", "earliest"},
                                     {"allow.auto.create.topics", "false"}});
  if (!conf) return Error{conf.error()};
  std::string errstr;
  std::unique_ptr<RdKafka::KafkaConsumer> consumer(RdKafka::KafkaConsumer::create(conf->get(), errstr));
  if (!consumer) return Error{"cannot make a Kafka consumer for " + settings.brokers + ": " + errstr};
  return std::unique_ptr<AttemptLogReader>(new AttemptLogReader(settings, std::move(consumer)));
}

Expected<AttemptLogRead> AttemptLogReader::read(std::int32_t partition, std::optional<std::int64_t> from) {
  const auto deadline = Clock::now() + settings_.timeout;
  const std::string topic = attempt_log_topic(settings_.topic);
  const std::string where = "partition " + std::to_string(partition) + " of the attempt log " + topic;
  std::int64_t low = 0;
  std::int64_t high = 0;
  const auto err = consumer_->query_watermark_offsets(topic, partition, &low, &high, remaining_ms(deadline));
  if (err != RdKafka::ERR_NO_ERROR) {
    std::string message = "cannot read where " + where + " ends on the Kafka cluster at " + settings_.brokers + ": " +
                          RdKafka::err2str(err);
    if (err == RdKafka::ERR_UNKNOWN_TOPIC_OR_PART) {
      message += " (it needs a partition for each of " + settings_.topic + "'s: pillbox worker says how to create it)";
    }
    return Error{message};
  }
  AttemptLogRead r;
  r.end = high;
  r.from = from.value_or(low);
  if (from && (*from < low || *from > high)) {
    r.note = where + " holds offsets " + std::to_string(low) + ".." + std::to_string(high) + ", not " +
             std::to_string(*from) + " (" +
             (*from < low ? "retention removed entries the commit needs: histories may be short"
                          : "the commit's metadata is not this log's") +
             "): read from its beginning";
    r.from = low;
  }
  if (r.from >= high) return r;

  std::vector<RdKafka::TopicPartition*> assignment{RdKafka::TopicPartition::create(topic, partition, r.from)};
  const auto assigned = consumer_->assign(assignment);
  RdKafka::TopicPartition::destroy(assignment);
  if (assigned != RdKafka::ERR_NO_ERROR) return Error{"cannot read " + where + ": " + RdKafka::err2str(assigned)};
  std::int64_t next = r.from;  // offsets rise; one handed over twice is skipped
  std::string last_error;
  while (next < high && Clock::now() < deadline) {
    std::unique_ptr<RdKafka::Message> m(consumer_->consume(std::min(remaining_ms(deadline), 100)));
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
    if (m->offset() < next || m->offset() >= high) continue;
    next = m->offset() + 1;
    KafkaMessage e;
    e.topic = topic;
    e.partition = partition;
    e.offset = m->offset();
    if (m->key_pointer() != nullptr) e.key.emplace(static_cast<const char*>(m->key_pointer()), m->key_len());
    if (m->payload() != nullptr) {
      // Cut past the bound: unreadable all the same, and a hostile value
      // does not fill the worker's memory.
      e.value.emplace(static_cast<const char*>(m->payload()), std::min(m->len(), kMaxAttemptEntryBytes + 1));
    }
    e.timestamp_ms = m->timestamp().timestamp;
    r.entries.push_back(std::move(e));
  }
  consumer_->unassign();
  if (next < high) {
    return Error{"the read of " + where + " stopped at offset " + std::to_string(next) + " of " +
                 std::to_string(r.from) + ".." + std::to_string(high) +
                 (last_error.empty() ? " when its time ran out" : ": " + last_error) +
                 ": the Kafka cluster at " + settings_.brokers +
                 " is slow or unreachable; the partition's records are not run before their attempts are read"};
  }
  return r;
}

}  // namespace pillbox::broker
