#pragma once
// One entry of a Kafka topic's attempt log, T.pillbox-attempts: what a
// worker writes about a record of T before it runs (start), when a delivery
// ends (end) and once it is settled (settled), and the parse of what is
// read back. Kafka keeps no delivery count, so this log is the count
// (docs/distributed.md, Kafka; issue 29, Must-hold 1). Pure: no librdkafka.
//
// The entries of T's partition p go to the attempt log's partition p, key
// "p:offset", value JSON:
//   {"v":1, "partition":p, "offset":o, "delivery":n, "entry":"start"|"end"|"settled",
//    "worker":..., "at_ms":...,
//    "record": {...}                (end: delivery_history.h's delivery_json)
//    "how": "ok"|"dead-letter"|"refused", "where": "..."   (settled)}
//
// Anyone who can produce to the attempt log can write an entry: each is a
// claim, read bounded and checked against where it was read (its
// partition, its key). What is not ours is unreadable (nullopt and why),
// never thrown. What is well formed is believed: a forged settle makes a
// record skipped, a forged end charges it. Only the workers should be
// allowed to write to the attempt log (a Kafka ACL); nothing here tells a
// worker's entry from another client's (they are not signed).
#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>

#include "supervisor/broker/delivery_history.h"
#include "supervisor/broker/kafka_message.h"

namespace pillbox::broker {

// An entry pillbox writes is at most this long (one delivery_json and a
// few numbers); a longer value is not one of its entries.
inline constexpr std::size_t kMaxAttemptEntryBytes = 96 << 10;

// T's attempt log: T.pillbox-attempts.
std::string attempt_log_topic(const std::string& topic);

enum class AttemptEntryKind : std::uint8_t { kStart, kEnd, kSettled };

// How a record was settled, and where what settled it went: "ok" and its
// result's place (T.results p@o, or "" without --results), "dead-letter"
// and T.dlq p@o, "refused" (dead-lettered unrun) and its T.dlq p@o.
struct KafkaSettlement {
  enum class How : std::uint8_t { kOk, kDeadLetter, kRefused };
  How how = How::kOk;
  std::string where;
};
const char* settlement_name(KafkaSettlement::How how);

struct AttemptEntry {
  std::int32_t partition = -1;  // of T (and of the attempt log: co-partitioned)
  std::int64_t offset = -1;     // of the record in T
  std::uint32_t delivery = 0;   // 1..kMaxDeliveries
  AttemptEntryKind kind = AttemptEntryKind::kStart;
  std::string worker;
  // The consumer group of the worker that wrote it: groups that read the
  // same topic share its attempt log, and count only their own entries.
  std::string group;
  std::int64_t at_ms = 0;
  RecordedDelivery end;        // kEnd: the delivery's outcome (or release)
  KafkaSettlement settlement;  // kSettled
};

// Delivery `delivery` of T's record p@o begins to run (written before its
// payload reaches a child).
AttemptEntry attempt_start(std::int32_t partition, std::int64_t offset, std::uint32_t delivery, std::string worker,
                           std::int64_t at_ms);
// Delivery `end.delivery` of p@o ended (ran, or was released unrun).
AttemptEntry attempt_end(std::int32_t partition, std::int64_t offset, RecordedDelivery end);
// p@o was settled by its delivery `delivery`.
AttemptEntry attempt_settled(std::int32_t partition, std::int64_t offset, std::uint32_t delivery, std::string worker,
                             std::int64_t at_ms, KafkaSettlement settlement);

// "p:o": the entry's key.
std::string attempt_entry_key(std::int32_t partition, std::int64_t offset);
std::string attempt_entry_json(const AttemptEntry& entry);
// The entry as a record of T's attempt log (its partition: the entry's).
KafkaOutgoing attempt_entry_record(const std::string& topic, const AttemptEntry& entry);

struct ParsedAttemptEntry {
  std::optional<AttemptEntry> entry;
  std::string why_not;  // when not read: what was wrong with it
};
// The entry a record of the attempt log's partition `log_partition` holds;
// not read when it is not one pillbox writes (a version it does not know,
// another partition's, a key that is not its own, a delivery outside
// 1..kMaxDeliveries, bigger than any pillbox writes).
ParsedAttemptEntry parse_attempt_entry(std::int32_t log_partition, const std::optional<std::string>& key,
                                       const std::optional<std::string>& value);

}  // namespace pillbox::broker
