#pragma once
// The attempt engine's back end for `run` over a store (attempt_store.h):
// the ledger, the quarantine and the kept results, all in the store's one
// SQLite database. A turn's effects are one transaction (group commit,
// ledger_batch.h), and the writes of tasks that ended ok are held back a few
// turns' worth at a time (see held_ok_).
#include <cstdint>
#include <set>

#include "supervisor/flow/attempt_store.h"
#include "supervisor/store/quarantine_store.h"

namespace pillbox {

class SqliteAttemptStore final : public AttemptStore {
 public:
  // None of them owned; each outlives this. `context.results` may be null
  // (no results kept).
  SqliteAttemptStore(store::Ledger& ledger, store::QuarantineStore& quarantine, BatchContext context)
      : ledger_(ledger), quarantine_(quarantine), context_(std::move(context)) {}

  Capabilities capabilities() const override { return Capabilities{}; }
  Expected<std::optional<store::LedgerTask>> find(const Task& task, const std::string& sha256) override;
  Expected<std::optional<store::StoredResult>> kept_result(std::int64_t task_id) override;
  Expected<std::string> record_payload(const std::string& sha256) override;

  void add(LedgerWrite write) override { batch_.add(std::move(write)); }
  void add_ok(std::int64_t task_id, LedgerWrite write, bool may_hold, Clock::time_point now) override;
  Expected<BatchResult> apply(std::vector<StartAttempt> starts, bool release_held, Commit when,
                              Clock::time_point now) override;
  Status commit_turn() override;
  bool turn_open() const override { return batch_.open(); }
  bool has_unapplied() const override { return !batch_.empty(); }
  bool idle() const override { return batch_.empty() && held_ok_.empty(); }
  std::optional<Clock::time_point> due_by() const override;

 private:
  // Writes the held ok writes now, in a transaction of their own.
  Status write_held_ok();

  store::Ledger& ledger_;
  store::QuarantineStore& quarantine_;
  BatchContext context_;
  LedgerBatch batch_;  // this turn's writes
  // The writes of tasks that ended ok (the attempt's end, "ok", the kept
  // result), held back from the turn's transaction and written a few turns'
  // worth at a time: each transaction that writes results dirties the
  // results table, its age index and the running total (3 of its ~7 pages),
  // whatever the number of results in it. Written with the next transaction
  // once kMaxHeldOk tasks or kMaxHeldOkFor have gone by, when the engine
  // releases them (AttemptStore::apply), or before find() reads such a task.
  LedgerBatch held_ok_;
  std::set<std::int64_t> held_ok_tasks_;            // their ledger ids
  std::optional<Clock::time_point> held_ok_since_;  // when the oldest was held
};

}  // namespace pillbox
