#pragma once
// What a broker must provide for its dead letters to be the fleet's
// quarantine: FleetQuarantineSource (fleet_quarantine_source.h) is written
// once over this, so the quarantine verbs print the same text and JSON for
// every broker, and what is the same for all of them (filters, counts,
// stats, reproduce's verdict) is written once below, over each().
//
// Its implementations: Redis's NAME:dlq (fleet_quarantine.h), RabbitMQ's NAME.dlq
// (amqp_quarantine.h), Kafka's T.dlq (kafka_quarantine.h). A record is a FleetRecord (fleet_record.h)
// whatever the broker; its id is the broker's (an entry id, an offset),
// always as text here, canonical (parse_id's).
//
// Errors, as QuarantineSource's: kUsage for a wrong request or a missing
// record (exit 2), kSetup for a broker that cannot be used (exit 3).
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json.hpp>

#include "shared/status.h"
#include "supervisor/broker/fleet_record.h"
#include "supervisor/ops/quarantine_source.h"
#include "supervisor/store/quarantine_store.h"

namespace pillbox::broker {

// An operator's change to one record's state, or why it may not happen
// (the error is shown as it is; its code says whose fault it is).
using StateChange = std::function<Status(FleetState& state, const FleetRecord& record)>;

class FleetDeadLetters {
 public:
  virtual ~FleetDeadLetters() = default;

  // What its records can do (the same as the implementation's
  // kCapabilities, which the CLI reads before anything is opened).
  virtual QuarantineCapabilities can() const = 0;
  // Where the records are (list --json's "store"), never with a password.
  virtual std::string where() const = 0;
  // What names this quarantine in a command shown as a hint:
  // " --redis URL --stream NAME".
  virtual std::string hint_options() const = 0;
  // The width of a table's ID column.
  virtual int id_width() const = 0;
  // A record id as an operator typed it, in its canonical text, or a kUsage
  // error saying what an id is here.
  virtual Expected<std::string> parse_id(const std::string& text) const = 0;
  // A record's id as --json prints it: text (an entry id) unless the
  // broker's ids are numbers.
  virtual nlohmann::json id_json(const std::string& id) const { return id; }
  // The fleet's key: every record read from now on has its signature
  // checked (FleetRecord::signature); without one, kUnchecked.
  virtual void use_key(std::optional<FleetKey> key) = 0;
  // That key (nullptr without one) and the name its records are signed
  // under (NAME:dlq, NAME.dlq): an operator's allowance is signed with them
  // too (fleet_allowance.h).
  virtual const FleetKey* key() const = 0;
  virtual std::string signed_name() const = 0;

  // Every record, newest first, with what operators did with it; `fn`
  // returns false to stop. Read in pages: never the whole quarantine in
  // memory. A payload over 64 KiB may be left out (payload_omitted): a
  // listing never needs the bytes.
  virtual Status each(const std::function<bool(const FleetRecord&)>& fn) = 0;
  // One record (parse_id's text) with its payload; kUsage when there is none.
  virtual Expected<FleetRecord> get(const std::string& id) = 0;
  // What the last each() left out of the records and why, for the
  // operator ("" when nothing): never hidden silently.
  virtual std::string left_out() const { return ""; }

  // show --json. The audit trail's first entry: who dead-lettered the
  // record, when and why.
  virtual store::AuditEntry dead_lettering(const FleetRecord& record) const = 0;
  // What only this broker says of a dead letter, added to show --json's
  // object under the broker's own name ("stream" on Redis, "amqp").
  virtual void add_broker_json(const FleetRecord& record, nlohmann::json& full) const = 0;

  // What operators do with records, kept with them.
  // Applies `change` to record `id`'s state atomically. With
  // `refuse_while_replaying`, a record a replay holds is refused. Returns
  // the record as it is after the change.
  virtual Expected<FleetRecord> change_state(const std::string& id, bool refuse_while_replaying,
                                             const StateChange& change) = 0;
  // Its minimized payload, checked against its state's sha256; kUsage when
  // it has none.
  virtual Expected<PayloadBytes> minimized_payload(const FleetRecord& record) = 0;
  // Where `pillbox minimize` keeps the record's progress and result.
  virtual std::unique_ptr<MinimizeKeeper> minimize_keeper(const std::string& id, const std::string& actor) = 0;
  // `quarantine patch` (fleet_revisions.h): keeps `bytes`, a revision's
  // payload, apart from the record's state, and returns where
  // (FleetRevision::at; -1 where the broker names them by the record's id
  // and their sha256). Idempotent for the same bytes.
  virtual Expected<std::int64_t> keep_revision_payload(const FleetRecord& record, std::string_view bytes) = 0;
  // The payload of `revision` of `record`, read from where it was kept,
  // only when it is that record's and has the sha256 and size its state
  // names (else a kUsage error saying which it is not); never more than
  // that size read into memory. Other errors: the broker's.
  virtual Expected<std::string> revision_payload(const FleetRecord& record, const FleetRevision& revision) = 0;
  // The records a replay would send back to the workers, oldest first, and
  // the replay itself (QuarantineSource::replay_plan, replay).
  virtual Expected<std::vector<FleetRecord>> redrive_plan(const ReplayRun& run, std::vector<std::string>& skipped) = 0;
  virtual Expected<ReplayResult> redrive(const ReplayRun& run) = 0;

 protected:
  FleetDeadLetters() = default;
  FleetDeadLetters(const FleetDeadLetters&) = default;
  FleetDeadLetters(FleetDeadLetters&&) = default;
  FleetDeadLetters& operator=(const FleetDeadLetters&) = default;
  FleetDeadLetters& operator=(FleetDeadLetters&&) = default;
};

// Whether `r` passes `filter` (limit and offset aside).
bool fleet_matches(const FleetRecord& r, const store::ListFilter& filter);

// each() of the records `filter` matches, its offset skipped, at most its
// limit of them.
Status each_matching(FleetDeadLetters& dead_letters, const store::ListFilter& filter,
                     const std::function<bool(const FleetRecord&)>& fn);
// How many records `filter` matches, limit and offset aside.
Expected<std::int64_t> count_matching(FleetDeadLetters& dead_letters, const store::ListFilter& filter);
// Records grouped by fingerprint and kind as QuarantineStore::stats groups
// them; `example_ids` gets each group's example (its newest record).
Expected<std::vector<store::FingerprintStats>> fleet_stats(FleetDeadLetters& dead_letters,
                                                           const store::ListFilter& filter,
                                                           std::vector<std::string>& example_ids);

// What this quarantine's key says of `record`'s allowance
// (fleet_allowance.h's allowance_signature).
Signature allowance_signature(const FleetDeadLetters& dead_letters, const FleetRecord& record);

// What a verb that acts on the store's records only says when it is asked
// for on the fleet's (quarantine purge --redis): "purge works on the store
// only, not on the fleet's quarantine (--redis, --amqp, --kafka)".
std::string store_only_verb(const std::string& verb);

// The verdict of `pillbox reproduce` (supervisor/ops/reproduce.h) with an
// audit entry, as QuarantineStore::record_reproduction keeps it.
Status record_reproduction(FleetDeadLetters& dead_letters, const std::string& id, const std::string& verdict,
                           std::int64_t runs, std::int64_t matches, const std::string& actor,
                           const std::string& detail);

// The result of `pillbox minimize` (supervisor/ops/minimize.h): the
// record's minimized payload is now `sha256` (its bytes saved already; at
// `at` where the broker keeps them apart from the record's id,
// FleetState::minimized_at, else -1), with an audit entry, as
// QuarantineStore::record_minimized keeps it.
Status record_minimized(FleetDeadLetters& dead_letters, const std::string& id, const std::string& sha256,
                        std::int64_t at, const std::string& actor, const std::string& detail);

}  // namespace pillbox::broker
