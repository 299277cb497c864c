#pragma once
// What a Kafka broker takes of one record, and the one rule for a record
// pillbox produces that it would refuse: its value goes, the rest stays.
// A result or a dead letter the cluster refuses cannot settle its record:
// every worker that got the record would stop on it, and its partition
// with it (docs/distributed.md, Kafka). Pure.
#include <cstddef>
#include <optional>
#include <string>

#include "supervisor/broker/kafka_message.h"

namespace pillbox::broker {

// A default broker's message.max.bytes: the largest record batch it takes
// (1 MiB and 12 bytes).
inline constexpr std::size_t kKafkaBrokerMessageMaxBytes = 1048588;
// What a record's framing takes beyond its bytes, and each header's beyond
// its name and value (lengths, attributes, varints), rounded up.
inline constexpr std::size_t kKafkaRecordFraming = 64;

// What `record` takes of a broker's message.max.bytes (rounded up).
std::size_t kafka_record_bytes(const KafkaOutgoing& record);

// A value left out of a record to fit: how large the record was with it,
// the value's size and SHA-256 (hex), and why in words.
struct OmittedValue {
  std::size_t record_bytes = 0;
  std::size_t size = 0;
  std::string sha256;
  std::string why;
};

// When `record` is over kKafkaBrokerMessageMaxBytes and has a value that
// is not empty, the value becomes empty (not null: on a compacted topic a
// null value is a tombstone) and what it was comes back; else nullopt and
// `record` as it was. The caller says so in its headers, under its names.
std::optional<OmittedValue> omit_value_to_fit(KafkaOutgoing& record);
// When `record` is over it still (its value left out) and has a key that
// is not empty, the key becomes null, and what it was comes back: a record
// whose key alone is near the limit (one pillbox refused as too long,
// which its dead letter would carry whole) must settle too. For a record
// of a topic that is not compacted (a dead letter's).
std::optional<OmittedValue> omit_key_to_fit(KafkaOutgoing& record);

}  // namespace pillbox::broker
