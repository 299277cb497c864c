#pragma once
// One record of a Kafka topic as pillbox reads it, and one it writes: the
// parts the worker, the dead letters and the quarantine share, with no
// librdkafka type in them (docs/distributed.md, Kafka). Pure.
//
// Kafka tells a null key or value apart from an empty one, and a header
// may repeat and have a null value: all kept as they came.
#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <utility>
#include <vector>

namespace pillbox::broker {

using KafkaHeaders = std::vector<std::pair<std::string, std::optional<std::string>>>;

struct KafkaMessage {
  std::string topic;
  std::int32_t partition = -1;
  std::int64_t offset = -1;
  std::optional<std::string> key;
  std::optional<std::string> value;
  std::size_t value_size = 0;  // as the cluster sent it (KafkaPartitionReader::read may keep less)
  KafkaHeaders headers;
  std::int64_t timestamp_ms = -1;  // the record's timestamp (-1: none)
};

// A record to produce. partition -1: the producer's partitioner picks it
// (murmur2 of the key, as Java clients do).
struct KafkaOutgoing {
  std::string topic;
  std::int32_t partition = -1;
  std::optional<std::string> key;
  std::optional<std::string> value;
  KafkaHeaders headers;
};

// "T/p@o": where a record was read, the dedupe key of what pillbox writes
// about it (its attempt log entries, result, dead letter).
inline std::string kafka_source_key(const std::string& topic, std::int32_t partition, std::int64_t offset) {
  return topic + "/" + std::to_string(partition) + "@" + std::to_string(offset);
}

}  // namespace pillbox::broker
