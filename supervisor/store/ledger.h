#pragma once
// The task ledger: every attempt of every task, counted before the child
// starts; tasks are found by (handler identity, key, payload hash). See
// docs/architecture.md, The store and Verdicts: retries, quarantine, outages.
// Writes are grouped: begin(), writes, commit(): one transaction per
// dispatcher turn.
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "shared/status.h"
#include "supervisor/store/database.h"
#include "supervisor/store/statement.h"
#include "supervisor/store/task_state.h"

namespace pillbox::store {

struct AttemptSummary {
  std::uint32_t n = 0;
  bool finished = false;      // false: the supervisor was lost while it ran
  std::string kind;           // when finished
  std::string fingerprint;
  bool charged = true;        // false: not held against the payload
  bool solo = false;          // ran with nothing else in flight
  bool lost_with_evidence = false;  // unfinished, and its run left a death note
};

struct LedgerTask {
  std::int64_t id = 0;
  TaskState state = TaskState::kPending;
  std::uint32_t attempts = 0;
  std::vector<AttemptSummary> history;  // oldest first
  // The claim of another live process (or another host's, which cannot be
  // checked); "" when none, ours, or gone. When set, history is not read:
  // it is still being written.
  std::string claimed_elsewhere;
  // For a task ok: the handler version it ended ok under ('' unknown).
  std::string version;
};

struct StartedAttempt {
  std::int64_t task_id = 0;
  std::uint32_t n = 0;        // 0: not started: the task is already finished (state says how),
                              // or another live process runs it (claimed_elsewhere)
  TaskState state = TaskState::kPending;
  std::string claimed_elsewhere;  // that process's claim token
};

class Ledger {
 public:
  Ledger(Ledger&& other) noexcept;
  Ledger& operator=(Ledger&&) = delete;
  Ledger(const Ledger&) = delete;
  Ledger& operator=(const Ledger&) = delete;
  ~Ledger();  // rolls back a batch left open

  // Records this run (pid, host, what it runs) and prepares the statements.
  static Expected<Ledger> open(Database& db, const std::string& handler_identity, const std::string& policy_identity);

  std::int64_t run_id() const { return run_id_; }

  // Records earlier runs' death notes (runs.died_of), then removes the
  // files. Outside a batch.
  Status record_deaths(const std::string& store_dir);
  const std::string& job() const { return job_; }
  // The handler version this run's tasks run under (handler_version.h):
  // written with each task that ends ok. '' (the default): none.
  void set_version(std::string version) { version_ = std::move(version); }

  Expected<std::optional<LedgerTask>> find(const std::string& key, const std::string& payload_sha256);

  Status begin();
  Status commit();
  void rollback();
  bool in_batch() const { return in_txn_; }

  // Inside a batch. Creates the task on first sight; attempt numbers come
  // from the database, so concurrent runs never reuse one. Not started (n 0)
  // when another process finished it or a live one claims it. A started
  // task is claimed by this process until set_state gives a verdict or
  // release_claims; a gone process's claim is taken over. Clears the retry
  // time and held flag.
  // `fresh_budget`: the task gave up in an earlier run; its earlier attempts
  // stop counting, durably. `rerun_ok` (--rerun): an ok task is started again.
  Expected<StartedAttempt> start_attempt(const std::string& key, const std::string& payload_sha256,
                                         std::int64_t payload_size, std::int64_t now_ms, bool solo = false,
                                         bool fresh_budget = false, bool rerun_ok = false);
  // Inside a batch. start_attempt for a task find() did not know, in one
  // statement fewer. nullopt when another process made it since find:
  // nothing was written, and start_attempt decides.
  Expected<std::optional<StartedAttempt>> start_new_task(const std::string& key, const std::string& payload_sha256,
                                                         std::int64_t payload_size, std::int64_t now_ms,
                                                         bool solo = false);
  // Ends an attempt this run started, and no other: after a failed commit
  // the task's id may be another process's task (SQLite reuses a rolled-back
  // rowid), and its attempt n another run's.
  Status end_attempt(std::int64_t task_id, std::uint32_t n, std::int64_t now_ms, const std::string& kind,
                     const std::string& fingerprint, const std::string& message, bool charged,
                     std::string_view stderr_tail = {});
  Status uncharge(std::int64_t task_id, std::uint32_t n);
  // A verdict (any state but pending) releases this process's claim.
  Status set_state(std::int64_t task_id, TaskState state, std::int64_t now_ms);
  // Inside a batch. Why the task waits: a retry due at `next_retry_at_ms`
  // (0: none), or `held` by a suspected outage; for `pillbox tasks`.
  Status set_wait(std::int64_t task_id, std::int64_t next_retry_at_ms, bool held);
  // Releases every claim of this process (the run ends; also after a signal).
  Status release_claims();
  // Releases this process's claim of one task, which stays pending, neither
  // held nor waiting for a retry here: given back for another process to run.
  Status release_claim(std::int64_t task_id);

 private:
  Ledger(Database& db, std::string job);
  // The attempts row of a task's attempt just counted (started.n).
  Status insert_attempt(const StartedAttempt& started, std::int64_t now, bool solo);

  Database* db_;
  std::string job_;
  std::string version_;
  std::string claim_;  // this process's claim token
  std::int64_t run_id_ = 0;
  // Prepared once: there is a transaction per dispatcher turn.
  Statement begin_;
  Statement commit_;
  Statement rollback_;
  bool in_txn_ = false;
  Statement find_task_;
  Statement find_attempts_;
  Statement insert_new_task_;
  Statement upsert_task_;
  Statement bump_attempts_;
  Statement insert_attempt_;
  Statement end_attempt_;
  Statement uncharge_;
  Statement set_state_;
  Statement uncharge_all_;
  Statement set_wait_;
  Statement release_claims_;
  Statement release_claim_;
};

// Inserts this process's runs row (pid, host, what it runs); returns its id.
Expected<std::int64_t> insert_run(Database& db, std::int64_t now_ms, const std::string& handler_identity,
                                  const std::string& policy_identity);

}  // namespace pillbox::store
