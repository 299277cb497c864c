#pragma once
// One quarantine, whichever back end holds it: the store's records
// (store_quarantine_source.h) or the fleet's dead letters on Redis
// (supervisor/broker/fleet_quarantine_source.h). The quarantine verbs are
// written once against this; what a back end cannot do is a capability
// (QuarantineCapabilities) the verb checks.
//
// Error codes (shared/status.h): kUsage for a wrong request or a missing
// record (exit 2), kSetup for an unusable back end (exit 3).
#include <any>
#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "shared/status.h"
#include "supervisor/ops/patch_record.h"
#include "supervisor/ops/replay.h"
#include "supervisor/store/quarantine_store.h"

namespace pillbox {

class MinimizeKeeper;  // supervisor/ops/minimize.h

// What one back end's records can do beyond the common verbs.
struct QuarantineCapabilities {
  bool discard_by_raise_site = false;  // discard --raise-site RS
  bool signatures = false;             // records signed by whoever wrote them (list's SIGNATURE)
  bool replays_here = false;           // replay runs payloads here (else: sent back to the workers)
  bool patches = false;                // patch: an operator's fix kept as the record's next revision
  bool patches_args = false;           // ... of its handler arguments too (patch --set-arg), not only its payload
  // A replay gets each resolved payload's output back (for --out); else
  // the results stay where the workers put them (RabbitMQ: a reply_to, or
  // NAME.results, which the replay does not consume).
  bool replay_outputs = true;
};

// One record as the verbs see it.
struct SourcedRecord {
  nlohmann::json id;               // as --json prints it: the store's number, the fleet's entry id (a string)
  store::QuarantineRecord record;  // the record; record.id is 0 where ids are not numbers
  std::string signature;           // valid, missing, bad, unchecked; "" where records are not signed
  std::string state_error;         // why what operators did with it cannot be read ("" when it can)
  std::any native;                 // what the back end keeps of it for its own calls

  // "42", "1712345678901-0".
  std::string id_text() const { return id.is_string() ? id.get<std::string>() : id.dump(); }
};

// A payload's exact bytes and their sha256.
struct PayloadBytes {
  std::string bytes;
  std::string sha256;
};

// What an operator's change of status (discard, allow, allow --revoke) did
// to one record.
struct StatusChange {
  bool already = false;  // it was where the change puts it: left as it was
  std::string was;       // its status before
  // Allowed on the fleet without a fleet key: replay --allowed takes it
  // only with --trust-unsigned.
  bool unsigned_allowance = false;
};
using Discarded = StatusChange;
using Reviewed = StatusChange;

// One replayed record, as a replay tells it (ReplayRun::on_result).
struct ReplayedRecord {
  const nlohmann::json& id;
  const store::QuarantineRecord& record;
  const Outcome& outcome;
  store::ReplayVerdict verdict;
  std::int64_t revision = 0;    // > 0: it ran that revision (a patch); 0: the original
  std::string output_omitted;   // why its output is not at hand ("" when it is)
  std::string result_variant;   // how --out names its result: run's KEY~VARIANT rule ("" for KEY)
};

// A replay: the records it takes, how fast it goes and when it stops,
// whichever way its payloads run (QuarantineSource::replay).
struct ReplayRun : ReplayBrakes {
  std::vector<std::string> ids;  // parse_id's texts; none: the filter
  store::ListFilter filter;      // --fingerprint, --kind, --raise-site (--all: empty)
  bool force = false;            // also resolved and discarded records
  // --allowed: only records an operator allowed (quarantine allow); on the
  // fleet, only those whose allowance is signed with the fleet key
  // (fleet_allowance.h) unless trust_unsigned.
  bool allowed_only = false;
  std::string actor;
  bool name_results = false;     // the results go to files (--out): ReplayedRecord::result_variant wanted
  // Run here (replays_here): the runner the operator chose instead of the recorded one.
  std::optional<HandlerChoice> handler;
  std::optional<Policy> policy;
  RecordAllowance allowed;
  std::size_t jobs = 1;
  // Sent back to the workers: records with no valid signature too, and how
  // long a batch's outcomes are waited for.
  bool trust_unsigned = false;
  std::chrono::milliseconds batch_timeout{300'000};
  std::function<void(const ReplayedRecord&)> on_result;
  std::function<void(std::size_t done, std::size_t total)> on_progress;

  store::ReplayScope scope() const { return store::replay_scope(force, allowed_only); }
};

// A record a replay would run (--dry-run), and the revision it would run (0: the original).
struct PlannedReplay {
  nlohmann::json id;
  store::QuarantineRecord record;
  std::int64_t revision = 0;
};

class QuarantineSource {
 public:
  virtual ~QuarantineSource() = default;

  virtual QuarantineCapabilities can() const = 0;
  // Where the records are (list --json's "store"): the store directory, or
  // "redis://HOST:PORT/DB NAME:dlq".
  virtual std::string where() const = 0;
  // The width of a table's ID column: the store's numbers, the fleet's entry ids.
  virtual int id_width() const = 0;
  // A record id as an operator typed it, in its canonical text, or a kUsage
  // error saying what an id is here.
  virtual Expected<std::string> parse_id(const std::string& text) const = 0;
  // A record id (parse_id's text) as --json prints it: SourcedRecord::id.
  virtual nlohmann::json id_json(const std::string& id) const = 0;
  // What the last each(), count() or stats() left out of the records and
  // why, for the operator ("" when nothing): list and stats say it.
  virtual std::string left_out() const { return ""; }

  // Records newest first; `fn` returns false to stop. Never the whole
  // quarantine in memory at once.
  virtual Status each(const store::ListFilter& filter, const std::function<bool(const SourcedRecord&)>& fn) = 0;
  // How many records `filter` matches, limit and offset aside.
  virtual Expected<std::int64_t> count(const store::ListFilter& filter) = 0;
  // each() of `filter`'s page (limit and offset), and how many records it
  // matches in all. A back end whose count() rereads every record overrides
  // this to do both in one pass.
  virtual Expected<std::int64_t> each_counted(const store::ListFilter& filter,
                                              const std::function<void(const SourcedRecord&)>& fn);
  // Records grouped by fingerprint and kind; `example_ids[i]` is group i's
  // example record's id.
  virtual Expected<std::vector<store::FingerprintStats>> stats(const store::ListFilter& filter,
                                                               std::vector<nlohmann::json>& example_ids) = 0;
  // One record by its id (parse_id's text); kUsage when there is none.
  virtual Expected<SourcedRecord> get(const std::string& id) = 0;

  // show --json's object without the payload's head (full_record_json).
  virtual Expected<nlohmann::json> full_json(const SourcedRecord& r) = 0;
  // The record's payload, checked against its hash; with `revision` > 0,
  // that revision's (kUsage when it has none, or revisions are not kept).
  virtual Expected<PayloadBytes> payload(const SourcedRecord& r, std::int64_t revision = 0) = 0;
  // At most its payload's first `max_bytes` (a preview, show's head): read
  // without the rest where the back end can, and then not checked against
  // its hash; kUsage when they are known not to be its bytes.
  virtual Expected<std::string> payload_head(const SourcedRecord& r, std::size_t max_bytes) = 0;
  // Its minimized payload, checked; kUsage when it has none.
  virtual Expected<PayloadBytes> minimized_payload(const SourcedRecord& r) = 0;
  // What names this quarantine in a command shown as a hint ("pillbox
  // reproduce ID" + this): "" for the store, " --redis URL --stream NAME".
  virtual std::string hint_options() const = 0;
  // Whether what the record names may run (a bundle's reproduce.sh): a
  // kUsage error saying why not and what to do.
  virtual Status check_runnable(const SourcedRecord& r, bool trust_unsigned) const = 0;

  // kUsage when a replay holds the record now (its status or its claim):
  // it may not be discarded, reviewed or patched until the replay is over;
  // the error says "ACT it when the replay is over" with `act` ("discard").
  virtual Status check_discardable(const SourcedRecord& r, const std::string& act) = 0;
  // Sets record `id` (parse_id's text; check_discardable passed) to
  // discarded with an audit entry ("discarded", by `actor`, detail "REASON
  // (was STATUS)"), atomically; refused (kUsage) when a replay took it in
  // between. By id: a verb that discards many keeps no payload meanwhile.
  virtual Expected<Discarded> discard(const std::string& id, const std::string& actor, const std::string& reason) = 0;
  // Moves record `id` (parse_id's text) as store::review_step says, with an
  // audit entry (review_action, by `actor`, detail "NOTE (was STATUS)"),
  // atomically: refused (kUsage, "record ID " + the step's refusal) when
  // its status may not move, or a replay holds it now. On the fleet an
  // allowance is signed with the fleet key, when there is one.
  virtual Expected<Reviewed> review(const std::string& id, store::Review review, const std::string& actor,
                                    const std::string& note) = 0;

  // Keeps an operator's fix as record `id`'s next revision (parse_id's
  // text; `request.record_id` is set here), refused as patch_record
  // (patch_record.h) says; kUsage where can().patches is false.
  virtual Expected<store::Revision> patch(const std::string& id, PatchRequest request) = 0;

  // The verdict of `pillbox reproduce` (reproduce.h), kept with the record
  // with an audit entry.
  virtual Status record_reproduction(const SourcedRecord& r, const std::string& verdict, std::int64_t runs,
                                     std::int64_t matches, const std::string& actor, const std::string& detail) = 0;
  // Where `pillbox minimize` keeps the record's progress and result.
  virtual std::unique_ptr<MinimizeKeeper> minimize_keeper(const SourcedRecord& r, const std::string& actor) = 0;

  // The records `run` would replay, changing nothing; `skipped` says which
  // given ones it leaves and why.
  virtual Expected<std::vector<PlannedReplay>> replay_plan(const ReplayRun& run, std::vector<std::string>& skipped) = 0;
  // Replays them in batches with its brakes: run here (replays_here), or
  // sent back to the workers and their outcomes waited for. A stop signal
  // is not an error (stop_signal says which).
  virtual Expected<ReplayResult> replay(const ReplayRun& run) = 0;
};

}  // namespace pillbox
