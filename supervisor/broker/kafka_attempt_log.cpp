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

std::string how_to_create(const AttemptLogSettings& settings, std::size_t partitions, std::size_t brokers) {
  return "kafka-topics.sh --bootstrap-server " + settings.brokers + " --create --topic " +
         attempt_log_topic(settings.topic) + " --partitions " + std::to_string(partitions) +
         " --replication-factor " + std::to_string(std::clamp<std::size_t>(brokers, 1, 3)) +
         " --config cleanup.policy=delete --config retention.ms=604800000" +
         " (not compacted: a record has several entries; retention of at least 7 days)";
}

}  // namespace

// The delivery reports of the write under way, by the id each message
// carries as its opaque. Served by flush() on the writer's thread: a report
// of an earlier write that gave up waiting finds no slot, and is dropped.
struct AttemptLogWriter::Reports : RdKafka::DeliveryReportCb {
  std::uint64_t next_id = 1;
  std::map<std::uint64_t, AttemptWritten*> pending;

  void dr_cb(RdKafka::Message& message) override {
    const auto it = pending.find(reinterpret_cast<std::uintptr_t>(message.msg_opaque()));
    if (it == pending.end()) return;
    if (message.err() != RdKafka::ERR_NO_ERROR) {
      it->second->error = "not written: " + message.errstr();
    } else {
      it->second->log_offset = message.offset();
    }
    pending.erase(it);
  }
};

Status check_attempt_log_topic(RdKafka::Producer& handle, const AttemptLogSettings& settings) {
  // All topics: asking for one by name makes some clusters (and
  // librdkafka's mock) create it.
  RdKafka::Metadata* raw = nullptr;
  const auto err = handle.metadata(true, nullptr, &raw, static_cast<int>(settings.timeout.count()));
  std::unique_ptr<RdKafka::Metadata> metadata(raw);
  if (err != RdKafka::ERR_NO_ERROR) {
    return Status::error("cannot read the topics of the Kafka cluster at " + settings.brokers + ": " +
                         RdKafka::err2str(err) + " (is it reachable? are these its brokers?)");
  }
  const std::string log = attempt_log_topic(settings.topic);
  const RdKafka::TopicMetadata* source = nullptr;
  const RdKafka::TopicMetadata* attempts = nullptr;
  for (const RdKafka::TopicMetadata* t : *metadata->topics()) {
    if (t->err() != RdKafka::ERR_NO_ERROR) continue;
    if (t->topic() == settings.topic) source = t;
    if (t->topic() == log) attempts = t;
  }
  if (source == nullptr) {
    return Status::error("topic " + settings.topic + " does not exist on the Kafka cluster at " + settings.brokers +
                         " (create it, or check --topic)");
  }
  const std::size_t wanted = source->partitions()->size();
  if (attempts == nullptr) {
    return Status::error("the attempt log " + log + " does not exist on the Kafka cluster at " + settings.brokers +
                         ": pillbox counts each record's attempts there. Create it with as many partitions as " +
                         settings.topic + " (" + std::to_string(wanted) +
                         "): " + how_to_create(settings, wanted, metadata->brokers()->size()));
  }
  if (attempts->partitions()->size() < wanted) {
    return Status::error("the attempt log " + log + " has " + std::to_string(attempts->partitions()->size()) +
                         " partitions and " + settings.topic + " has " + std::to_string(wanted) +
                         ": the entries of a record of partition p go to its partition p. Add partitions: "
                         "kafka-topics.sh --bootstrap-server " + settings.brokers + " --alter --topic " + log +
                         " --partitions " + std::to_string(wanted));
  }
  return Status::ok();
}

AttemptLogWriter::AttemptLogWriter(AttemptLogSettings settings, std::unique_ptr<Reports> reports,
                                   std::unique_ptr<RdKafka::Producer> producer)
    : settings_(std::move(settings)), reports_(std::move(reports)), producer_(std::move(producer)) {}

AttemptLogWriter::~AttemptLogWriter() {
  // What a write gave up on is not waited for again: the worker said so.
  if (producer_) producer_->purge(RdKafka::Producer::PURGE_QUEUE | RdKafka::Producer::PURGE_INFLIGHT);
}

Expected<std::unique_ptr<AttemptLogWriter>> AttemptLogWriter::open(const AttemptLogSettings& settings) {
  auto conf = client_conf(settings, {{"enable.idempotence", "true"},
                                     {"acks", "all"},
                                     {"message.timeout.ms", std::to_string(settings.timeout.count())},
                                     {"allow.auto.create.topics", "false"}});
  if (!conf) return Error{conf.error()};
  auto reports = std::make_unique<Reports>();
  std::string errstr;
  if ((*conf)->set("dr_cb", static_cast<RdKafka::DeliveryReportCb*>(reports.get()), errstr) !=
      RdKafka::Conf::CONF_OK) {
    return Error{"librdkafka: " + errstr};
  }
  std::unique_ptr<RdKafka::Producer> producer(RdKafka::Producer::create(conf->get(), errstr));
  if (!producer) return Error{"cannot make a Kafka producer for " + settings.brokers + ": " + errstr};
  if (Status s = check_attempt_log_topic(*producer, settings); !s) return Error{s.message()};
  return std::unique_ptr<AttemptLogWriter>(new AttemptLogWriter(settings, std::move(reports), std::move(producer)));
}

std::vector<AttemptWritten> AttemptLogWriter::write(const std::vector<AttemptEntry>& entries) {
  std::vector<AttemptWritten> out(entries.size());
  const auto deadline = Clock::now() + settings_.timeout;
  const std::string topic = attempt_log_topic(settings_.topic);
  reports_->pending.clear();
  for (std::size_t i = 0; i < entries.size(); ++i) {
    const AttemptEntry& e = entries[i];
    std::string key = attempt_entry_key(e.partition, e.offset);
    std::string value = attempt_entry_json(e);
    const std::uint64_t id = reports_->next_id++;
    reports_->pending[id] = &out[i];
    RdKafka::ErrorCode err;
    while ((err = producer_->produce(topic, e.partition, RdKafka::Producer::RK_MSG_COPY, value.data(), value.size(),
                                     key.data(), key.size(), 0, reinterpret_cast<void*>(id))) ==
               RdKafka::ERR__QUEUE_FULL &&
           Clock::now() < deadline) {
      producer_->poll(10);  // the local queue is full: let reports drain it
    }
    if (err != RdKafka::ERR_NO_ERROR) {
      reports_->pending.erase(id);
      out[i].error = "not written to " + topic + " partition " + std::to_string(e.partition) + ": " +
                     RdKafka::err2str(err);
      if (err == RdKafka::ERR__UNKNOWN_PARTITION) {
        out[i].error += " (" + topic + " needs as many partitions as " + settings_.topic + ")";
      }
    }
  }
  // flush() sends what is queued at once (linger.ms aside) and serves the
  // delivery reports: one round trip for the batch. In short waits, so that
  // a message of an earlier write given up on does not hold this one.
  while (!reports_->pending.empty() && Clock::now() < deadline) {
    producer_->flush(std::min(remaining_ms(deadline), 100));
  }
  for (auto& [id, slot] : reports_->pending) {
    slot->error = "no delivery report from the Kafka cluster at " + settings_.brokers + " within " +
                  std::to_string(settings_.timeout.count()) + " ms (it may have been written)";
  }
  reports_->pending.clear();
  return out;
}

std::string AttemptLogWriter::fatal_error() const {
  std::string errstr;
  if (producer_->fatal_error(errstr) == RdKafka::ERR_NO_ERROR) return "";
  return errstr;
}

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
