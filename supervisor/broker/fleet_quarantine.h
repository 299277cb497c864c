#pragma once
// The fleet's quarantine on Redis: the dead letters of stream NAME, read and
// acted on by the quarantine verbs given --redis URL --stream NAME, as they
// act on the store's records (through fleet_dead_letters.h). Keys: docs/distributed.md, Keys and fields. A record's id
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
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "shared/status.h"
#include "supervisor/broker/fleet_dead_letters.h"
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
  std::string revisions_prefix;   // NAME:dlq:revisions: (a hash per record: sha256 -> a revision's payload)
  std::string revisions(const std::string& id) const { return revisions_prefix + id; }
};
FleetKeys fleet_keys(const std::string& name);

// "redis://host:port/db NAME:dlq": where the records are (list --json's "store").
std::string fleet_location(const RedisAddress& address, const FleetKeys& keys);

// A record id as operators type it: an entry id (MS-SEQ); a usage error otherwise.
Expected<std::string> parse_fleet_id(const std::string& text);

// Redis's dead letters as the fleet's quarantine (fleet_dead_letters.h).
class FleetQuarantine final : public FleetDeadLetters {
 public:
  // Connects, and checks that NAME:dlq is a stream (or missing: no records yet).
  static Expected<FleetQuarantine> open(const RedisAddress& address, const std::string& stream);
  // The same on a connection made already: its errors then are about the
  // keys (or the connection breaking), never about reaching Redis.
  static Expected<FleetQuarantine> open(RedisConnection redis, const std::string& stream);

  // Known before Redis is read (a verb refused before it is): patches of
  // the payload only (fleet_revisions.h); no discard by raise site.
  static constexpr QuarantineCapabilities kCapabilities{.signatures = true, .patches = true};
  QuarantineCapabilities can() const override { return kCapabilities; }
  std::string where() const override { return fleet_location(address(), keys_); }
  std::string hint_options() const override { return " --redis URL --stream " + keys_.stream.stream; }
  int id_width() const override { return 15; }  // "1712345678901-0"
  Expected<std::string> parse_id(const std::string& text) const override { return parse_fleet_id(text); }

  // Records newest first, as the store lists them; `fn` returns false to
  // stop. Pages through the stream: a long quarantine is never in memory at
  // once. A payload over 64 KiB is not read (the record's payload_omitted;
  // its size from Redis): listings, counts and stats never need the bytes.
  Status each(const std::function<bool(const FleetRecord&)>& fn) override;
  // One record; usage errors for an id that is not one.
  Expected<FleetRecord> get(const std::string& id) override;

  // The worker that dead-lettered it, of which group, and why.
  store::AuditEntry dead_lettering(const FleetRecord& record) const override;
  // "stream": its name, group, entry and deliveries.
  void add_broker_json(const FleetRecord& record, nlohmann::json& full) const override;

  // A compare and set of its state in NAME:dlq:state, retried when another
  // process changed it in between; with `refuse_while_replaying`, a record
  // whose redrive lock exists is refused.
  Expected<FleetRecord> change_state(const std::string& id, bool refuse_while_replaying,
                                     const StateChange& change) override;
  // Under keys().minimized(id) (fleet_minimize_keeper.h).
  Expected<PayloadBytes> minimized_payload(const FleetRecord& record) override;
  std::unique_ptr<MinimizeKeeper> minimize_keeper(const std::string& id, const std::string& actor) override;
  // A revision's payload in the hash keys().revisions(id), field its sha256.
  Expected<std::int64_t> keep_revision_payload(const FleetRecord& record, std::string_view bytes) override;
  Expected<std::string> revision_payload(const FleetRecord& record, const FleetRevision& revision) override;
  // Back onto NAME (fleet_redrive.h, redis_redrive.h).
  Expected<std::vector<FleetRecord>> redrive_plan(const ReplayRun& run, std::vector<std::string>& skipped) override;
  Expected<ReplayResult> redrive(const ReplayRun& run) override;

  void use_key(std::optional<FleetKey> key) override { key_ = std::move(key); }
  const FleetKey* key() const override { return key_ ? &*key_ : nullptr; }
  std::string signed_name() const override { return keys_.stream.dlq; }

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

}  // namespace pillbox::broker
