#pragma once
// A dead letter on Kafka as pillbox writes it to T.dlq and reads it back
// (docs/distributed.md, Kafka). Pure: no librdkafka, no I/O here.
//
// The record itself is the original, exact: its key (null stays null), its
// value (null stays null), its headers, and it goes to the original's
// partition number in T.dlq (co-partitioned, as the attempt log is), so
// that the copies of one record (a worker killed after producing it and
// before its settle entry produces it again) are in one partition, in the
// order they were written, whatever its key. T.dlq needs at least T's
// partitions (the worker's check).
//
// pillbox's part is headers, each named pillbox-* or pillbox.*:
//   pillbox-record   the worker's record (JSON), as Redis's `record` field
//                    and RabbitMQ's pillbox-record (dead_letter_fit.h)
//   pillbox-sig      with a fleet key: the signature (fleet_key.h) over the
//                    key, the value and every header, in order
//   pillbox.dedupe   "T/p@o" (kafka_source_key): one record per dedupe key
//   and, as Kafka Connect's __connect.errors.* context headers
//   (errors.deadletterqueue.context.headers.enable), text headers:
//   pillbox.source.topic/.partition/.offset  (__connect.errors.topic, ...)
//   pillbox.kind, pillbox.message            (exception.class.name, .message)
//   pillbox.stderr   the child's stderr tail  (exception.stacktrace)
//   pillbox.handler, pillbox.policy          (connector.name: who judged it)
//   pillbox.fingerprint, pillbox.attempts, pillbox.reason
//   pillbox.headers  what became of the original's headers (JSON)
//   pillbox.payload_omitted "true", pillbox.payload_size, .payload_sha256:
//                    the value was left out (below), its size and SHA-256
// The context headers repeat what the record says, for tools that read
// headers only (kcat, Connect's own tooling); pillbox reads the record.
//
// Bounds: Kafka refuses a record over the topic's max.message.bytes
// (1 MiB by default, key, value and headers together), and the original
// may take most of it. pillbox's part stays under about 64 KiB: the record
// is fitted within kMaxKafkaRecordJson, the stderr tail is at most 8 KiB,
// the message 4 KiB. The original's headers are carried while they take at
// most kMaxKafkaCarriedHeaders (names and values); the rest are dropped and
// pillbox.headers says how many. So a dead letter is at most its
// original's key and value plus about 128 KiB. One over what a default
// broker takes (kafka_record_fit.h) goes without the original's value
// (empty; its record says payload_omitted, payload_size, payload_sha256 and
// where the original is: T keeps it at its offset while its retention
// does), as a result goes without its output: a letter the cluster refused
// would settle nothing, and every worker that got the record would stop on
// it, its partition stuck. T.dlq's max.message.bytes should exceed T's by
// 128 KiB for originals to be kept whole.
//
// Forged headers: a producer to T must not be able to write pillbox's
// headers. An original's header named like pillbox's (pillbox-*,
// pillbox.*) is carried renamed, as pillbox.original.NAME (counted in
// pillbox.headers' "renamed"): kept, never read as pillbox's.
//
// What a dead letter says is a claim (anyone allowed to produce to T.dlq
// can write one): read bounded, and what cannot be read is said in
// `unreadable`, never thrown.
#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json.hpp>

#include "supervisor/broker/fleet_key.h"
#include "supervisor/broker/kafka_message.h"

namespace pillbox::broker {

inline constexpr std::size_t kMaxKafkaRecordJson = 32u << 10;
inline constexpr std::size_t kMaxKafkaCarriedHeaders = 64u << 10;
// The prefix an original's pillbox-named header is carried under.
inline constexpr std::string_view kRenamedHeaderPrefix = "pillbox.original.";

// T.dlq: where the dead letters of topic T go.
inline std::string kafka_dlq_topic(const std::string& topic) { return topic + ".dlq"; }

// The headers that say where a record of T came from, on everything pillbox
// produces about it (its dead letter, its result): pillbox.dedupe
// (kafka_source_key), pillbox.source.topic, .partition, .offset.
KafkaHeaders kafka_source_headers(const KafkaMessage& original);

// Where a record came from, as its dead letter's record says it (the
// `source` of stream_entry.h's dead_letter_record, under "topic"): T, p, o,
// the consumer group and the dedupe key.
nlohmann::json kafka_record_source(const KafkaMessage& original, const std::string& group);

// The dead letter of `original` (read from T), to T.dlq, with the worker's
// record (JSON text: dead_letter_record(..., "topic", kafka_record_source))
// fitted within kMaxKafkaRecordJson, and signed with `fleet_key` when given.
KafkaOutgoing kafka_dead_letter(const KafkaMessage& original, const std::string& record,
                                const FleetKey* fleet_key);

// A record of T.dlq read back.
struct KafkaDeadLetter {
  std::string topic;  // where it is: T.dlq, partition, offset
  std::int32_t partition = -1;
  std::int64_t offset = -1;
  std::int64_t timestamp_ms = -1;
  std::optional<std::string> key;    // the original's, exact
  std::optional<std::string> value;  // the payload, exact; empty when payload_omitted
  // The value was left out of the letter (too large for a record with
  // pillbox's headers): the payload's size and SHA-256 as its headers say.
  bool payload_omitted = false;
  std::int64_t payload_size = -1;
  std::string payload_sha256;
  // pillbox-record parsed (an object), null when there is none or it
  // cannot be read (`unreadable` says why).
  nlohmann::json record;
  // The context headers, "" or -1 where absent or unreadable.
  std::string source_topic;
  std::int32_t source_partition = -1;
  std::int64_t source_offset = -1;
  std::string dedupe;  // pillbox.dedupe as it came
  std::string kind;
  std::string fingerprint;
  std::string message;
  std::string reason;
  std::string stderr_tail;
  std::string handler;
  std::string policy;
  std::int64_t attempts = -1;
  nlohmann::json headers_note;  // pillbox.headers parsed; null when none
  // The original's headers as carried on (pillbox.original.* among them,
  // under that name), in order.
  KafkaHeaders carried;
  bool has_signature = false;  // a pillbox-sig header (valid or not)
  // pillbox.dedupe when it is the key of the source its pillbox.source.*
  // headers and its record's `topic` name; else "": a letter that says two
  // things is no copy of anything, and nothing is a copy of it.
  std::string dedupe_key;
  std::string unreadable;  // "" or which parts could not be read, and why
  bool from_pillbox() const { return !record.is_null(); }
};
KafkaDeadLetter read_kafka_dead_letter(const KafkaMessage& letter);

// What a Kafka dead letter's signature covers: its key and value (each
// absent when null), and every header but pillbox-sig in order as fields
// "header" (name and value, a null told apart), plus `sig` for each
// pillbox-sig (two do not verify). FleetKey::sign/verify's input, under
// the name of T.dlq (a letter copied to another topic does not verify).
SignedFields kafka_dead_letter_signed_fields(const std::optional<std::string>& key,
                                             const std::optional<std::string>& value, const KafkaHeaders& headers);
// The signature of `letter` as `fleet_key` finds it (kUnchecked without one).
Signature kafka_dead_letter_signature(const KafkaMessage& letter, const FleetKey* fleet_key);

}  // namespace pillbox::broker
