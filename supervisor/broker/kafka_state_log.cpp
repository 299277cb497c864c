#include "supervisor/broker/kafka_state_log.h"

#include <memory>
#include <optional>
#include <utility>

#include "supervisor/broker/kafka_dead_letter.h"
#include "supervisor/broker/kafka_producer.h"

namespace pillbox::broker {

std::string kafka_state_log_topic(const std::string& topic) { return kafka_dlq_topic(topic) + ".state"; }

KafkaStateLog::KafkaStateLog(KafkaPartitionReader& reader, const std::string& topic)
    : reader_(reader), name_(kafka_state_log_topic(topic)) {}

KafkaStateLog::~KafkaStateLog() = default;

Expected<std::int64_t> KafkaStateLog::end() {
  auto partitions = reader_.partitions(name_);
  if (!partitions) return Error{partitions.error(), partitions.error_code()};
  if (*partitions == 0) return 0;
  auto marks = reader_.watermarks(name_, 0);
  if (!marks) return Error{marks.error(), marks.error_code()};
  return marks->high;
}

Status KafkaStateLog::read(std::int64_t from, std::int64_t to, const std::function<bool(const StateLogEntry&)>& stop) {
  if (to < 0) {
    // On to the end as it is now: past every entry appended and
    // acknowledged before this call.
    auto end = this->end();
    if (!end) return Status::error(end.error(), end.error_code());
    to = *end;
  }
  return reader_.read(name_, 0, from, to, [&](KafkaMessage&& m) {
    const std::string* writer = nullptr;
    for (const auto& [name, value] : m.headers) {
      if (name == kStateWriterHeader && value) {
        writer = &*value;
        break;
      }
    }
    const bool kept = m.value && m.value->size() <= kMaxStateBytes;
    return !stop(StateLogEntry{kept ? &*m.value : nullptr, writer});
  });
}

Status KafkaStateLog::prepare() {
  auto partitions = reader_.partitions(name_);
  if (!partitions) return Status::error(partitions.error(), partitions.error_code());
  if (*partitions == 0) {
    return Status::error(
        "Kafka at " + reader_.bootstrap().joined() + " has no topic " + name_ +
            ": operators' changes to the records of the quarantine are kept there. Create it with one partition, "
            "kept for ever and not compacted: " +
            kafka_create_topic_command(reader_.bootstrap(), name_, 1, -1) +
            " --config cleanup.policy=delete --config retention.ms=-1",
        ErrorCode::kSetup);
  }
  if (producer_) return Status::ok();
  auto producer = open_kafka_tool_producer(reader_.bootstrap(), "pillbox-quarantine");
  if (!producer) return Status::error(producer.error(), ErrorCode::kSetup);
  producer_ = std::move(*producer);
  return Status::ok();
}

Status KafkaStateLog::append(const std::string& body, const std::string& writer) {
  if (auto s = prepare(); !s) return s;
  KafkaOutgoing m;
  m.topic = name_;
  m.partition = 0;
  m.value = body;
  m.headers = {{std::string(kStateWriterHeader), writer}};
  auto sent = producer_->produce_and_wait(m, static_cast<int>(kKafkaDeliveryTimeout.count()));
  if (!sent) {
    return Status::error("no delivery report from Kafka at " + reader_.bootstrap().joined() + " for " + name_ +
                             " within " + std::to_string(kKafkaDeliveryTimeout.count() / 1000) +
                             " s (the change may have been written; read the record again)",
                         ErrorCode::kSetup);
  }
  if (!*sent) return Status::error("cannot write to " + name_ + ": " + sent->error(), ErrorCode::kSetup);
  return Status::ok();
}

}  // namespace pillbox::broker
