#pragma once
// A Kafka dead letter (kafka_dead_letter.h) as the fleet's quarantine shows
// it: the FleetRecord every broker's dead letters become (fleet_record.h),
// so the quarantine verbs print it as Redis's and RabbitMQ's, and which
// letters of T.dlq are copies of an earlier record. Pure: no librdkafka.
//
// A record's id is where its dead letter is in T.dlq: "P@O" (partition,
// offset), which stays the record's for as long as T.dlq keeps it.
//
// Copies: pillbox settles at least once (docs/distributed.md, Kafka), so a
// worker killed after producing a dead letter and before writing its
// settle entry produces one again when the record is run again: the same
// pillbox.dedupe ("T/p@o"), the same value, in the same partition of T.dlq
// (co-partitioned), later. Such a letter is a copy of the first: one record
// per source record. A copy has the same dedupe key, the same value (its
// SHA-256; a null value apart from an empty one), and the same signature
// class: its verdict with the fleet key (valid, bad, missing), whether it
// is signed at all without it. So a forged letter never hides a signed one
// whatever its order: an unsigned or badly signed letter with a real
// one's dedupe key is a record of its own (shown with its signature),
// and the first valid letter is the record. Without the key a letter with
// a forged `sig` that came first can hide a real one behind it, which the
// key, once given, undoes; nothing unsigned runs without --trust-unsigned
// anyway (check_signed). A letter whose dedupe key disagrees with the
// source it names has none (KafkaDeadLetter::dedupe_key): a record of its
// own, never a copy, never copied.
#include <cstddef>
#include <optional>
#include <string>
#include <vector>

#include "shared/status.h"
#include "supervisor/broker/fleet_record.h"
#include "supervisor/broker/kafka_dead_letter.h"

namespace pillbox::broker {

// "P@O" of a letter of T.dlq.
std::string kafka_record_id(std::int32_t partition, std::int64_t offset);
// A record id as operators type it, canonical ("0@007" is "0@7"), or a
// usage error saying what an id is here.
Expected<std::string> parse_kafka_record_id(const std::string& text);
// Where a record id (checked as parse_kafka_record_id does) is: its
// partition and offset.
struct KafkaPlace {
  std::int32_t partition = -1;
  std::int64_t offset = -1;
};
Expected<KafkaPlace> parse_kafka_place(const std::string& text);

// The letter as a record, its signature `signature` (kafka_dead_letter_signature).
// record.id 0 and FleetRecord::id "P@O"; stream, source_entry: the source
// topic and "p@o" there; group: the record's claim. `broker` (show --json's
// "kafka"): where it is, its source and dedupe key, whether key and value
// were null, the original's headers carried and what became of the others,
// what could not be read. A letter pillbox did not write (no readable
// record) still is a record: of its context headers' kind and fingerprint
// when it has them, else a protocol-error that says it is foreign.
FleetRecord kafka_fleet_record(const KafkaDeadLetter& letter, Signature signature);

// Its identity among copies (above), "" when it has none.
std::string kafka_copy_key(const KafkaDeadLetter& letter, Signature signature);

// For each letter of `copy_keys` (kafka_copy_key of the letters in T.dlq
// order: each partition's in offset order; partitions in any order, since
// copies share one), the index of the earlier letter it is a copy of, or
// nullopt when it is a record.
std::vector<std::optional<std::size_t>> kafka_copies(const std::vector<std::string>& copy_keys);

}  // namespace pillbox::broker
