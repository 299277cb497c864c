#pragma once
// What the attempt engine (task_flow.h) asks of the back end that keeps its
// tasks' attempts and verdicts: see docs/architecture.md, 'Adding a back end'.
// The engine decides; the back end only records the typed writes of
// ledger_batch.h, in the order decided.
//
// Implementations: sqlite_attempt_store.h (`run`), memory_attempt_store.h
// (--no-store), supervisor/broker/stream_back_end.h (`worker`).
#include <chrono>
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "shared/status.h"
#include "supervisor/exec/task_source.h"
#include "supervisor/flow/ledger_batch.h"
#include "supervisor/store/ledger.h"
#include "supervisor/store/result_store.h"

namespace pillbox {

class AttemptStore {
 public:
  using Clock = std::chrono::steady_clock;
  virtual ~AttemptStore() = default;

  // What the back end can do; the engine's rules that need what it cannot
  // are off, or take another course (task_flow.h says which).
  struct Capabilities {
    // A poison payload is kept as a record (QuarantinePayload is answered
    // with its id). Without, the engine reports it and keeps nothing.
    bool keeps_records = true;
    // A poison verdict given in this run can be taken back (TakeBackRecord)
    // when a suspected outage explains it.
    bool takes_back = true;
    // The run may end on its own: the breaker open longer than its limit,
    // tasks that cannot see a file of the host, a command that fails on its
    // own setup. A broker's worker may not (nothing would run the tasks it
    // holds): it gives its held tasks back to the fleet instead
    // (ReleaseTask) and goes on probing, and a failure without its payload
    // read counts as any failure.
    bool can_stop = true;
    // The same key and payload twice among the inputs is one task, run once
    // (run's files). A broker's deliveries are tasks each, to be settled each.
    bool merges_repeats = true;
    // An ok is told once the back end answers its settle (TaskSettled),
    // naming where its result went (a broker's results entry). Without, it
    // is told at once, before it is durable: after a crash in between the
    // task runs again and its result comes twice, never not at all.
    bool tells_ok_when_settled = false;
  };
  virtual Capabilities capabilities() const = 0;

  // Intake: what the back end knows of `task` (its key, and its payload of
  // hash `sha256`; nullopt: nothing yet). A task whose ok is written but not
  // yet durable reads as ok (its writes are made durable first).
  virtual Expected<std::optional<store::LedgerTask>> find(const Task& task, const std::string& sha256) = 0;
  // The result kept for a task done earlier (`run --out` of a task skipped as
  // ok); nullopt when this back end keeps no results.
  virtual Expected<std::optional<store::StoredResult>> kept_result(std::int64_t task_id) = 0;
  // The payload of a record, to run its task again when its verdict is taken back.
  virtual Expected<std::string> record_payload(const std::string& sha256) = 0;

  // An effect of this turn, in the order decided.
  virtual void add(LedgerWrite write) = 0;
  // An effect of a task that ended ok (the end of its attempt, its state,
  // its result). They may be held back for a few turns and made durable
  // together (the back end's choice: fewer writes), when `may_hold` and
  // always when the task's earlier ok writes were held: an ok task's writes
  // become durable together, never some without the others. Until they are,
  // a crash makes the task run again (alone), never ok without its result.
  // `now`: the engine's clock (held writes are due kMaxHeldOkFor after the first).
  virtual void add_ok(std::int64_t task_id, LedgerWrite write, bool may_hold, Clock::time_point now) = 0;

  // When apply() may return before this turn's writes are durable.
  // kLeaveOpen: the rest waits for commit_turn() (see LedgerBatch::Commit).
  using Commit = LedgerBatch::Commit;
  // Makes this turn's effects durable, in the order added, and then
  // `starts`, the attempts that start this turn. Each start is answered
  // once, in the order given: an attempt number, or 0 and why the task does
  // not run here; in this apply() or, for a back end whose writes complete
  // later, a later one (the task holds its slot meanwhile). `release_held`:
  // the held ok writes go too (a task is about to run alone, the run ends,
  // or nothing starts soon to share a write with). On failure nothing of
  // the turn is kept but what a later apply() may still write (never a
  // start: its task does not run), and the run stops.
  virtual Expected<BatchResult> apply(std::vector<StartAttempt> starts, bool release_held, Commit when,
                                      Clock::time_point now) = 0;
  // Ends what apply(kLeaveOpen) left open. On failure the turn's starts are
  // not counted: their tasks must not get their payloads.
  virtual Status commit_turn() = 0;
  // Whether apply(kLeaveOpen) left the turn's writes open (its starts are
  // not durable until commit_turn()).
  virtual bool turn_open() const = 0;
  // Effects added and not yet given to apply(), held ok writes aside, or
  // answers ready for it: the engine's next turn is due at once.
  virtual bool has_unapplied() const = 0;
  // Nothing added waits to be made durable or answered, held ok writes
  // included.
  virtual bool idle() const = 0;
  // What the engine's wait also watches: a back end whose answers come
  // later makes one of these readable when they are in (the next apply()
  // returns them). None for a back end that answers in apply() itself.
  virtual std::vector<int> wait_fds() const { return {}; }
  // By when the held ok writes are due to be made durable (an apply by
  // then), nullopt when none are held.
  virtual std::optional<Clock::time_point> due_by() const = 0;
  // Not "": the back end asks the run to wind down, and says why (an error
  // of its own, a signal it caught). One that cannot stop winds down as on
  // SIGTERM: what runs finishes, the rest is given back (task_flow.h).
  virtual std::string stopping() const { return ""; }
};

}  // namespace pillbox
