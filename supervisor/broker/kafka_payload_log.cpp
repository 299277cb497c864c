#include "supervisor/broker/kafka_payload_log.h"

#include <utility>

#include "supervisor/broker/kafka_dead_letter.h"
#include "supervisor/broker/kafka_producer.h"
#include "supervisor/io/random_hex.h"

namespace pillbox::broker {

std::string kafka_minimized_topic(const std::string& topic) { return kafka_dlq_topic(topic) + ".minimized"; }
std::string kafka_revisions_topic(const std::string& topic) { return kafka_dlq_topic(topic) + ".revisions"; }

KafkaPayloadLog::KafkaPayloadLog(KafkaPartitionReader& reader, std::string name, std::string of_header)
    : reader_(reader), name_(std::move(name)), of_header_(std::move(of_header)) {}

KafkaPayloadLog::~KafkaPayloadLog() = default;

std::unique_ptr<KafkaPayloadLog> KafkaPayloadLog::minimized(KafkaPartitionReader& reader, const std::string& topic) {
  return std::unique_ptr<KafkaPayloadLog>(
      new KafkaPayloadLog(reader, kafka_minimized_topic(topic), std::string(kMinimizedOfHeader)));
}

std::unique_ptr<KafkaPayloadLog> KafkaPayloadLog::revisions(KafkaPartitionReader& reader, const std::string& topic) {
  return std::unique_ptr<KafkaPayloadLog>(
      new KafkaPayloadLog(reader, kafka_revisions_topic(topic), std::string(kRevisionOfHeader)));
}

Expected<std::int64_t> KafkaPayloadLog::append(const std::string& id, std::string_view bytes) {
  if (!producer_) {
    auto partitions = reader_.partitions(name_);
    if (!partitions) return Error{partitions.error(), partitions.error_code()};
    if (*partitions == 0) {
      return Error{"Kafka at " + reader_.bootstrap().joined() + " has no topic " + name_ +
                       ": payloads kept for the quarantine's records go there. Create it with one partition, not "
                       "compacted, kept at least as long as the dead letters: " +
                       kafka_create_topic_command(reader_.bootstrap(), name_, 1, -1) +
                       " --config cleanup.policy=delete",
                   ErrorCode::kSetup};
    }
    auto producer = open_kafka_tool_producer(reader_.bootstrap(), "pillbox-quarantine");
    if (!producer) return Error{producer.error(), producer.error_code()};
    producer_ = std::move(*producer);
  }
  auto writer = random_hex(8);
  if (!writer) return Error{writer.error()};
  KafkaOutgoing m;
  m.topic = name_;
  m.partition = 0;
  m.value = std::string(bytes);
  m.headers = {{of_header_, id}, {std::string(kPayloadWriterHeader), *writer}};
  auto sent = producer_->produce_and_wait(m, static_cast<int>(kKafkaDeliveryTimeout.count()));
  if (!sent) {
    return Error{"no delivery report from Kafka at " + reader_.bootstrap().joined() + " for " + name_ + " within " +
                     std::to_string(kKafkaDeliveryTimeout.count() / 1000) + " s",
                 ErrorCode::kSetup};
  }
  if (!*sent) return Error{"cannot write to " + name_ + ": " + sent->error(), ErrorCode::kSetup};
  if ((*sent)->offset < 0) return Error{"the payload written to " + name_ + " came back without its offset"};
  return (*sent)->offset;
}

Expected<std::optional<KeptPayloadEntry>> KafkaPayloadLog::entry_at(std::int64_t offset, std::uint64_t most,
                                                                   std::string& why_not) {
  const std::string where = "offset " + std::to_string(offset) + " of " + name_;
  auto partitions = reader_.partitions(name_);
  if (!partitions) return Error{partitions.error(), partitions.error_code()};
  if (*partitions == 0) {
    why_not = "its state names " + where + ", and there is no " + name_;
    return std::optional<KeptPayloadEntry>();
  }
  auto marks = reader_.watermarks(name_, 0);
  if (!marks) return Error{marks.error(), marks.error_code()};
  if (offset >= marks->high) {
    why_not = "its state names " + where + ", which ends before it (at " + std::to_string(marks->high) + ")";
    return std::optional<KeptPayloadEntry>();
  }
  std::optional<KafkaMessage> found;
  // One byte past `most`: a value cut there was larger.
  const std::size_t cut = most < ~std::size_t{0} ? static_cast<std::size_t>(most) + 1 : ~std::size_t{0};
  auto s = reader_.read(
      name_, 0, offset, offset + 1,
      [&](KafkaMessage&& m) {
        found = std::move(m);
        return false;
      },
      cut);
  if (!s) return Error{s.message(), s.code()};
  if (!found || found->offset != offset) {
    why_not = where + " is no longer there (removed by a retention policy?)";
    return std::optional<KeptPayloadEntry>();
  }
  KeptPayloadEntry entry;
  for (const auto& [name, value] : found->headers) {
    if (name == of_header_ && value) {
      entry.of = *value;
      break;
    }
  }
  entry.size = found->value_size;
  if (found->value && found->value_size <= most) entry.bytes = std::move(*found->value);
  if (!found->value) entry.bytes = std::string();  // a null value: no bytes (its sha256 is the empty string's)
  return std::optional<KeptPayloadEntry>(std::move(entry));
}

}  // namespace pillbox::broker
