#pragma once
// One dead letter (an entry of NAME:dlq, from stream_entry.h's
// dead_letter_fields) read back as the store's QuarantineRecord, so the
// quarantine verbs print both quarantines alike. Its `record` field (the JSON
// of `quarantine list --json`) is parsed back field for field. Its id is the
// entry id, its creation time that id's time. Pure: no Redis.
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include <nlohmann/json.hpp>

#include "shared/status.h"
#include "supervisor/broker/fleet_key.h"
#include "supervisor/broker/fleet_state.h"
#include "supervisor/broker/stream_reply.h"
#include "supervisor/classify/outcome.h"
#include "supervisor/store/quarantine_store.h"

namespace pillbox::broker {

struct FleetRecord {
  std::string id;                   // the dead letter's entry id in NAME:dlq
  store::QuarantineRecord record;   // record.id is 0: ids here are entry ids
  std::string payload;              // the exact bytes (field `payload`)
  bool payload_omitted = false;     // "" above: not read (FleetQuarantine::each)
  // Why, when the dead letter itself holds no payload (a Kafka letter too
  // large for a record: where the original is); "" when a listing left it out.
  std::string payload_omitted_why;
  // Set on the dead letter of a redrive that failed again: it is an attempt
  // of that record (its state holds the outcome), not a record of its own.
  std::string redrive_of;
  std::string stream;               // the stream it came from, its group and entry there
  std::string group;
  std::string source_entry;
  std::string reason;               // why the worker dead-lettered it
  std::uint32_t deliveries = 0;     // the broker's delivery count when it was dead-lettered
  std::vector<FleetAttempt> attempts;  // those deliveries, oldest first
  FleetState state;
  bool replaying = false;           // its redrive lock is held now
  std::string replaying_by;         // ... by this replay (the lock's value, its control bytes as '?')
  // Why its state or lock could not be read (a value pillbox did not write),
  // "" when they could: the record lists as nobody acted on it, with this.
  std::string unreadable_state;
  // Its signature as this reader's fleet key finds it (fleet_key.h; set by
  // FleetQuarantine, kUnchecked without a key).
  Signature signature = Signature::kUnchecked;
  // What only its broker says of it, as show --json prints it under the
  // broker's name (FleetDeadLetters::add_broker_json); null when nothing.
  nlohmann::json broker;
};

// What a dead letter says of itself beside its worker's record, for what
// the record does not say (a record that cannot be read says nothing).
struct DeadLetterClaims {
  std::string key;
  std::string kind;
  std::string fingerprint;
  std::string payload_sha256;  // of the payload in hand; "" when it was not read
  std::int64_t payload_size = 0;
};

// A worker's record (the JSON of `quarantine list --json` without its id,
// with policy, reason, deliveries, attempts_history and stderr_tail_b64:
// stream_entry.h's dead_letter_record), written by the workers of every
// broker, read into `out`: each field for what it still says, and what it
// does not say from `own`; the message, when it has none, is `unreadable`
// (why there is no record, "" when `record` is one). out.deliveries, when
// not 0, is kept. The broker's own part of the record (Redis's "stream",
// RabbitMQ's "queue") is the caller's. Never fails: every field is a claim.
void read_worker_record(const nlohmann::json& record, const DeadLetterClaims& own, std::string unreadable,
                        FleetRecord& out);

// Never fails: a dead letter with no `record` field, or one that is not
// JSON, is still a record (of its `key`, `kind`, `fingerprint` and
// `payload` fields), with a message that says what was missing.
// `omitted_payload_size`: the entry's payload was left out (its size
// given); the record's sha256 is then its record's claim only ("" when it
// has none).
FleetRecord parse_dead_letter(const std::string& id, const EntryFields& fields,
                              std::optional<std::int64_t> omitted_payload_size = std::nullopt);

// The record as operators left it: status (replaying while a replay holds
// its lock: `lock_holder` is the lock's value, "" when there is none), the
// time of the last change, the reproduction verdict, the minimized payload.
void apply_state(FleetRecord& record, FleetState state, const std::string& lock_holder);

// The dead letter's payload, checked against the sha256 its record names (as
// the store checks its payloads); the error says which record.
Expected<std::string> checked_payload(const FleetRecord& record);

// Whether a verb may run what `record` names — reproduce, minimize, a
// redrive, a bundle's reproduce.sh, the console's Reproduce: only with a
// valid signature, or when the operator says --trust-unsigned for that
// command. The error names the record, what is wrong with its signature and
// what to do.
Status check_signed(const FleetRecord& record, bool trust_unsigned);

// The milliseconds part of a stream entry id ("1712345678901-0"); 0 when it is not one.
std::int64_t entry_time_ms(std::string_view id);

// The outcome of a result entry (NAME:results): ok, its output and resources.
Outcome result_outcome(const EntryFields& fields);

}  // namespace pillbox::broker
