#pragma once
// The ledger writes of one dispatcher turn, as data. The task flow adds them
// as it decides; apply() writes them in one transaction (group commit), in
// order, and returns what the database assigned by the task's ref.
#include <cstdint>
#include <string>
#include <string_view>
#include <variant>
#include <vector>

#include "shared/status.h"
#include "supervisor/classify/outcome.h"
#include "supervisor/classify/outcome_record.h"
#include "supervisor/store/ledger.h"
#include "supervisor/store/quarantine_store.h"
#include "supervisor/store/result_store.h"
#include "supervisor/store/run_identity.h"

namespace pillbox {

struct StartAttempt {
  std::uint64_t ref = 0;       // the flow's handle, echoed in the result
  std::string key;
  std::string sha256;
  std::int64_t payload_size = 0;
  bool solo = false;           // runs with nothing else in flight
  bool fresh_budget = false;   // gave up in an earlier run: old attempts stop counting
  bool rerun_ok = false;       // --rerun: a task ok in the ledger runs again
  bool new_task = false;       // the ledger did not know it when it was read: created with its attempt at once
  std::int64_t task_id = 0;    // its ledger id when known (0: a new task), so that its own earlier writes go first
  std::uint32_t attempts_before = 0;  // as the engine counted them: a back end that keeps none numbers on from it
};

struct EndAttempt {
  std::int64_t task_id = 0;
  std::uint32_t n = 0;
  // How it ended (the store keeps its kind, fingerprint and message; a
  // broker's history all of it). Kind "interrupted": cut short by the run's
  // end, its message says why.
  OutcomeRecord outcome;
  bool charged = true;
  bool transient = false;      // not the payload's fault, in the retry policy's word
  std::string stderr_tail;     // exec mode failures: the last bytes of stderr
};

struct UnchargeAttempt {
  std::int64_t task_id = 0;
  std::uint32_t n = 0;
};

struct SetTaskState {
  std::int64_t task_id = 0;
  store::TaskState state = store::TaskState::kOk;  // ok | gave-up
};

// The result of a task that ended ok, kept in the store (--keep-results),
// in the same transaction as its state: ok and its result commit together.
struct KeepResult {
  std::int64_t task_id = 0;
  std::string output;
};

// Why a task waits, for `pillbox tasks`: a retry due at a time (wall clock,
// ms; 0: none), or held by a suspected outage.
struct SetTaskWait {
  std::int64_t task_id = 0;
  std::int64_t next_retry_at_ms = 0;
  bool held = false;
};

// The run ends: every task it still claims is free for another run (a
// broker's back end records each one whose attempt did not end as given
// back, so that its next delivery is not counted as one that never
// reported back).
struct ReleaseClaims {};

// One task given back, pending, without a verdict: free for another process
// to run (a worker that cannot stop gives back what an outage held too long).
struct ReleaseTask {
  std::int64_t task_id = 0;
};

// A poison payload into the quarantine store, with its audit entry, and its
// task marked quarantined.
struct QuarantinePayload {
  std::uint64_t ref = 0;
  std::int64_t task_id = 0;
  std::string key;
  std::string sha256;
  std::string_view payload;    // the flow's copy; it outlives apply()
  std::uint32_t attempts = 0;
  Outcome outcome;
  std::string reason;
};

// A poison verdict of this run taken back (a suspected outage explains it):
// the record is released, unless an operator acted on it meanwhile, and its
// task is pending again.
struct TakeBackRecord {
  std::int64_t record_id = 0;
  std::int64_t task_id = 0;
  std::string detail;          // the audit entry's text
};

using LedgerWrite = std::variant<StartAttempt, EndAttempt, UnchargeAttempt, SetTaskState, KeepResult, SetTaskWait,
                                  ReleaseClaims, ReleaseTask, QuarantinePayload, TakeBackRecord>;

struct StartedAttemptOf {
  std::uint64_t ref = 0;
  std::int64_t task_id = 0;
  std::uint32_t n = 0;         // 0: another pillbox finished the task meanwhile, or runs it now
  store::TaskState state = store::TaskState::kPending;  // then: how it finished (ok | quarantined)
  std::string claimed_elsewhere;  // or: the claim of the live process that runs it
};

struct QuarantineWritten {
  std::uint64_t ref = 0;
  std::int64_t record_id = 0;
  bool new_fingerprint = false;
  bool folded = false;         // store full: counted as a repeat of an existing record
  std::string record_json;     // the new record, for --on-quarantine ("" when not new)
  std::string settled_as;      // where a broker put it (its dead-letter entry id); "" for the store's
};

// A task's ok settled by a back end that says where its result went
// (AttemptStore::Capabilities::tells_ok_when_settled).
struct TaskSettled {
  std::uint64_t ref = 0;
  std::string settled_as;      // a broker's results entry id ("" when no result is kept)
};

// A task the back end no longer holds (a broker's: another process took it
// over, or it was deleted): nothing more is recorded for it here, and its
// verdict is not this process's to give. How, for the sink's words (the
// engine treats all alike):
enum class LostAs : std::uint8_t {
  kTakenOver,     // another process has it, or it was deleted
  kDeadLettered,  // the back end settled it itself, unrun, and told so already
  kLeftPending,   // a step on it failed: left for another process, as a release
  kHandedBack,    // the back end handed it to its broker, which delivers it again later (a retry's wait)
};
struct TaskLost {
  std::uint64_t ref = 0;
  std::string why;
  LostAs as = LostAs::kTakenOver;
  // Its child, if one runs, is killed (TaskSource::take_stopped): another
  // process runs the task now (a Kafka partition handed to another
  // member), and two runs at once would do its work twice side by side.
  bool stop_child = false;
};

struct BatchResult {
  std::vector<StartedAttemptOf> started;    // in the order the starts were added
  std::vector<QuarantineWritten> quarantined;
  std::vector<TaskLost> lost;
  std::vector<TaskSettled> settled;
};

// Who writes, and how new records are described.
struct BatchContext {
  RunIdentity identity;
  std::string actor;           // "pillbox run (pid N)"
  std::string store_dir;       // for the record JSON
  // Where ok results are kept, and the most bytes kept (--keep-results; the
  // oldest go first). Null or 0: results are not kept.
  store::ResultStore* results = nullptr;
  std::uint64_t keep_results = 0;
};

class LedgerBatch {
 public:
  void add(LedgerWrite write) { writes_.push_back(std::move(write)); }
  // Moves every write of `other` to the end of this batch, and empties it.
  void add_all(LedgerBatch& other) {
    for (LedgerWrite& w : other.writes_) writes_.push_back(std::move(w));
    other.writes_.clear();
  }
  bool empty() const { return writes_.empty(); }
  std::size_t size() const { return writes_.size(); }
  const std::vector<LedgerWrite>& writes() const { return writes_; }

  // When apply() commits. kLeaveOpen: apply() writes the starts (and the
  // earlier writes of the tasks they start, in order) and leaves the
  // transaction open; commit_open() writes the rest of the batch (the ends
  // and results of other tasks: nothing the starts depend on) and commits,
  // so that most of a turn's cost (those writes and the WAL append) runs
  // while the turn's children fork, before any of them gets its payload
  // (TaskSource::commit_turn). A batch whose result is told only once it is
  // durable (a quarantine record, a record taken back, the run's claims
  // released) is written and committed at once all the same.
  enum class Commit { kNow, kLeaveOpen };

  // Writes everything in one transaction and empties the batch. When that
  // fails nothing of it is written, and the batch keeps every write but the
  // starts (their tasks do not run), for a later attempt to record.
  Expected<BatchResult> apply(store::Ledger& ledger, store::QuarantineStore& quarantine, const BatchContext& context,
                              Commit when = Commit::kNow);
  // A transaction apply() left open: true until commit_open() ends it.
  bool open() const { return !open_writes_.empty(); }
  // Writes the rest of what apply() left open and commits. On failure
  // nothing of it is written, and its writes but the starts go back into
  // the batch, ahead of any added since, as after a failed apply().
  Status commit_open(store::Ledger& ledger, store::QuarantineStore& quarantine, const BatchContext& context);

 private:
  // The open transaction's writes, in the order they were added, kept in
  // case it fails; the first `open_written_` of them are written already.
  std::vector<LedgerWrite> open_writes_;
  std::vector<bool> open_written_;
  bool open_kept_results_ = false;  // a result was kept before the launch: evict with the commit
  std::vector<LedgerWrite> writes_;
  // Puts `written` back, but its starts, ahead of the writes added since.
  void keep_after_failure(std::vector<LedgerWrite>& written);
};

}  // namespace pillbox
