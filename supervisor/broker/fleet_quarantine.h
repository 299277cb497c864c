#pragma once
// The fleet's quarantine: the dead letters of stream NAME, read and acted on
// by the quarantine verbs given --redis URL --stream NAME, as they act on the
// store's records. Keys: docs/distributed.md, Keys and fields. A record's id
// is its entry id in NAME:dlq; a dead letter with `redrive_of` is an attempt
// of the record it names, not a record. While a record's redrive lock
// exists it reads `replaying` and nobody else redrives or discards it.
//
// What the store's record has and the fleet's does not, in one place:
//   id       the dead letter's entry id ("1712345678901-0"), a string;
//   store    (list --json) the Redis server and the dead-letter stream;
//   repeats  always 0: workers do not fold repeats of one bug;
//   source   always "worker";
//   attempt history: one attempt per delivery of the entry (its "run" is the
//            worker's name; a delivery records when it ended, not when it
//            started, so both times are that one; a delivery that never
//            reported back is "unfinished" with no times, one released unrun by
//            a stopping worker is "released"), then one per redrive.
// And what only a dead letter has: show --json adds "stream" (name, group,
// entry, deliveries) and "reason" (why the worker dead-lettered it).
// Not on the fleet's records: purge and import (only workers write NAME:dlq).
// Errors are one line: an unknown or malformed id is a usage error
// (ErrorCode::kUsage); Redis unreachable or failing, or NAME or NAME:dlq
// holding a key of another type, a setup error.
#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "shared/status.h"
#include "supervisor/broker/fleet_record.h"
#include "supervisor/broker/redis_connection.h"
#include "supervisor/broker/stream_protocol.h"
#include "supervisor/store/quarantine_store.h"

namespace pillbox::broker {

struct FleetKeys {
  StreamKeys stream;        // NAME, NAME:results, NAME:dlq
  std::string state;        // NAME:dlq:state
  std::string lock_prefix;  // NAME:dlq:lock:
  std::string lock(const std::string& id) const { return lock_prefix + id; }
  std::string minimizing_prefix;  // NAME:dlq:minimizing:
  std::string minimizing(const std::string& id) const { return minimizing_prefix + id; }
  std::string minimized_prefix;   // NAME:dlq:minimized:
  std::string minimized(const std::string& id) const { return minimized_prefix + id; }
};
FleetKeys fleet_keys(const std::string& name);

// "redis://host:port/db NAME:dlq": where the records are (list --json's "store").
std::string fleet_location(const RedisAddress& address, const FleetKeys& keys);

// An operator's change to one record's state, or why it may not happen
// (the error is shown as it is; its code says whose fault it is).
using StateChange = std::function<Status(FleetState& state, const FleetRecord& record)>;

class FleetQuarantine {
 public:
  // Connects, and checks that NAME:dlq is a stream (or missing: no records yet).
  static Expected<FleetQuarantine> open(const RedisAddress& address, const std::string& stream);
  // The same on a connection made already: its errors then are about the
  // keys (or the connection breaking), never about reaching Redis.
  static Expected<FleetQuarantine> open(RedisConnection redis, const std::string& stream);

  // Records newest first, as the store lists them; `fn` returns false to stop.
  // Pages through the stream: a long quarantine is never in memory at once.
  // Without `with_payloads`, a payload over 64 KiB is not read (the record's
  // payload_omitted; its size from Redis): listings, counts and stats never
  // need the bytes. A redrive, which puts them back, asks for them.
  Status each(const store::ListFilter& filter, const std::function<bool(const FleetRecord&)>& fn,
              bool with_payloads = false);
  // How many records the filter matches, ignoring limit and offset.
  Expected<std::int64_t> count(const store::ListFilter& filter);
  // Records grouped by fingerprint and kind as QuarantineStore::stats groups
  // them; `example_ids` gets each group's example (its newest record).
  Expected<std::vector<store::FingerprintStats>> stats(const store::ListFilter& filter,
                                                       std::vector<std::string>& example_ids);
  // One record; usage errors for an id that is not one.
  Expected<FleetRecord> get(const std::string& id);

  // Applies `change` to record `id`'s state atomically (compare and set,
  // retried when another process changed it in between). With
  // `refuse_while_replaying`, a record whose redrive lock exists is refused.
  // Returns the record as it is after the change.
  Expected<FleetRecord> change_state(const std::string& id, bool refuse_while_replaying, const StateChange& change);

  // The verdict of `pillbox reproduce` (supervisor/ops/reproduce.h) with an
  // audit entry, as QuarantineStore::record_reproduction keeps it.
  Status record_reproduction(const std::string& id, const std::string& verdict, std::int64_t runs,
                             std::int64_t matches, const std::string& actor, const std::string& detail);

  // The fleet's key: every record read from now on has its signature
  // checked (FleetRecord::signature); without one, kUnchecked.
  void use_key(std::optional<FleetKey> key) { key_ = std::move(key); }

  RedisConnection& redis() { return redis_; }
  const FleetKeys& keys() const { return keys_; }
  const RedisAddress& address() const { return redis_.address(); }

 private:
  FleetQuarantine(RedisConnection redis, FleetKeys keys) : redis_(std::move(redis)), keys_(std::move(keys)) {}
  // The state and lock of each record, read in one round trip. A state or
  // lock pillbox did not write marks that record (unreadable_state) and
  // fails nothing.
  Status load_states(std::vector<FleetRecord>& records);
  // parse_dead_letter, then the signature as key_ finds it.
  FleetRecord read_dead_letter(const std::string& id, const EntryFields& fields,
                               std::optional<std::int64_t> omitted_payload_size = std::nullopt) const;

  RedisConnection redis_;
  FleetKeys keys_;
  std::optional<FleetKey> key_;
};

// Whether `r` passes `filter` (limit and offset aside).
bool fleet_matches(const FleetRecord& r, const store::ListFilter& filter);

// What a verb that acts on the store's records only says when it is asked
// for on the fleet's (quarantine patch --redis, the console's patch on
// serve --redis): "patch works on the store only, not on the fleet's
// quarantine (--redis)".
std::string store_only_verb(const std::string& verb);

// A record id as operators type it: an entry id (MS-SEQ); a usage error otherwise.
Expected<std::string> parse_fleet_id(const std::string& text);

}  // namespace pillbox::broker
