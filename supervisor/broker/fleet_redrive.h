#pragma once
// `pillbox quarantine replay` on the fleet's quarantine: records redriven
// (put back on the work queue for the workers) in batches, with the store's
// replay brakes (supervisor/ops/replay.h), each batch's outcomes waited
// for. Written once for every broker; what a broker does (lock a record,
// put it back, find how it ended) is its RedriveRoute: Redis's
// (redis_redrive.h), RabbitMQ's (amqp_redrive.h). Locks, waiting and what
// an earlier replay left: docs/distributed.md, The fleet's quarantine.
//
// What a redrive is in one place:
//   - it is claimed (the route's lock, so two replays never redrive one
//     record at once) and its state names it (FleetState::waiting_entry)
//     before it is put back: a replay that dies leaves the record waiting
//     for that redrive's outcome, never redriven twice for it;
//   - its outcome (an ok result, or the dead letter of its failing again)
//     is recorded in the record's state once (FleetState::redrives, by the
//     redrive's entry), whoever finds it: this replay, or a later one
//     (RedriveRoute::earlier_outcomes).
#include <chrono>
#include <cstddef>
#include <map>
#include <string>
#include <vector>

#include "shared/status.h"
#include "supervisor/broker/fleet_dead_letters.h"
#include "supervisor/broker/fleet_revisions.h"
#include "supervisor/classify/outcome.h"
#include "supervisor/ops/quarantine_source.h"
#include "supervisor/store/replay_store.h"

namespace pillbox::broker {

// How one redrive ended, as its broker found it.
struct RedriveOutcome {
  Outcome outcome;
  store::ReplayVerdict verdict = store::ReplayVerdict::kResolved;
  std::string worker;         // the consumer that settled it
  std::string entry;          // the redrive (FleetAttempt::entry)
  std::string outcome_entry;  // its result, or its dead letter (FleetAttempt::outcome_entry)
  // Why its output is not in outcome.output, for the operator (over the
  // worker's --results-max-output; on RabbitMQ always: the result is its
  // user's); "" when it is.
  std::string output_omitted;
};

// What one broker does for a replay (the Redriver in fleet_redrive.cpp
// calls these in order: earlier_outcomes once, then per batch mark, start
// for each record, outcomes until each has one, unlock).
class RedriveRoute {
 public:
  virtual ~RedriveRoute() = default;

  virtual FleetDeadLetters& dead_letters() = 0;
  // Names for the operator's messages: the work queue (NAME), where ok
  // outcomes are found and where failed ones are.
  virtual std::string work_name() const = 0;
  virtual std::string results_name() const = 0;
  virtual std::string dlq_name() const = 0;
  // What to check when a batch's outcomes do not come ("are workers
  // running, with NAME:results on?").
  virtual std::string no_outcome_hint() const = 0;

  // The outcomes of earlier replays' redrives of `plan`'s records (their
  // state's waiting_entry) that are settled, by redrive entry; a redrive
  // settled whose outcome can no longer be found is said in `notices` (and
  // its record is redriven again).
  virtual Expected<std::map<std::string, RedriveOutcome>> earlier_outcomes(const std::vector<FleetRecord>& plan,
                                                                           std::vector<std::string>& notices) = 0;
  // Before a batch starts: outcomes are looked for from here on.
  virtual Status mark() = 0;
  // Claims `record` (its lock; its state: waiting_entry, waiting_revision,
  // an audit entry "redriven" naming `batch_no`) and puts `what` back on
  // the work queue: a revision's payload, or at revision 0 the dead
  // letter's own. The redrive's entry, or "" when it was not this replay's
  // to redrive: why, in result.skipped (result.taken_by_others counted when
  // another replay holds it; a record whose newest revision is no longer
  // `what`'s: patched since). `record` is updated to its state as it was read.
  virtual Expected<std::string> start(FleetRecord& record, const RedrivePayload& what, std::size_t batch_no,
                                      ReplayResult& result) = 0;
  // Keeps the locks of the records `ids` held (a lease that runs out, on
  // Redis; a no-op where a lock ends with the connection).
  virtual Status renew(const std::vector<std::string>& ids) = 0;
  // The outcomes found since mark() of the redrives `waited` (entry ->
  // record id), waited for at most `most`; outcomes of other redrives are
  // not returned.
  virtual Expected<std::vector<RedriveOutcome>> outcomes(const std::map<std::string, std::string>& waited,
                                                         std::chrono::milliseconds most) = 0;
  // Lets go of record `id`'s lock (only while it is still this replay's).
  virtual Status unlock(const std::string& id) = 0;
};

// The outcome the dead letter `dead` of the redrive `entry` says: failed
// again, as its record says (a worker's), or as a broker's own dead
// lettering does (RabbitMQ's past x-delivery-limit: it killed every
// worker's supervisor).
RedriveOutcome redrive_failed_again(const FleetRecord& dead, const std::string& entry);

// Never one being replayed, even with --force: its lock is another replay's.
bool redrive_claimable(const FleetRecord& r, store::ReplayScope scope);
// Why a claim of `record` for a redrive of `what` is refused because the
// record was patched after `what` was read ("" when it was not).
std::string patched_since(const FleetState& state, const RedrivePayload& what, const std::string& id);
// With --allowed (run.allowed_only), the record's allowance checked
// (fleet_allowance.h: its status alone is anyone's to write); else ok.
Status check_redrive_allowance(const FleetDeadLetters& dead_letters, const FleetRecord& r, const ReplayRun& run);

// The records a replay would redrive, oldest first, without redriving
// anything (--dry-run); `skipped` says which given ones it leaves and why.
// Payloads over 64 KiB are read when their record starts.
Expected<std::vector<FleetRecord>> redrive_plan(FleetDeadLetters& dead_letters, const ReplayRun& run,
                                                std::vector<std::string>& skipped);

// Errors: an unknown id (usage), the broker failed (setup). A stop signal
// (SIGINT/SIGTERM) is not an error: stop_signal says which. Its result
// never counts `recovered`.
Expected<ReplayResult> redrive(RedriveRoute& route, const ReplayRun& run);

}  // namespace pillbox::broker
