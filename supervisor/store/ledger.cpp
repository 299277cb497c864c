#include "supervisor/store/ledger.h"

#include <unistd.h>

#include <utility>

#include "supervisor/store/death_note.h"
#include "supervisor/store/process_claim.h"
#include "supervisor/store/quarantine_store.h"

namespace pillbox::store {
namespace {

// A state this build does not know (a newer pillbox's store) is an error,
// not a guess.
Expected<TaskState> read_state(const Statement& stmt, int column) {
  const std::string text = stmt.column_text(column);
  if (auto state = task_state_from_string(text)) return *state;
  return Error{"unknown task state '" + text + "' in the ledger"};
}

// The claim read with a task: "" when none or ours; a gone process's claim
// is "" too: it is taken over.
std::string claim_of_another(const Statement& stmt, int column, const std::string& ours) {
  if (stmt.column_is_null(column)) return "";
  std::string claim = stmt.column_text(column);
  if (claim == ours || claim_holder(claim) == ClaimHolder::kGone) return "";
  return claim;
}

// A statement's error without its "store: " prefix, for a message that
// says "store: " itself.
std::string reason(const Status& s) {
  const std::string& m = s.message();
  return m.starts_with("store: ") ? m.substr(7) : m;
}

}  // namespace

Ledger::Ledger(Database& db, std::string job) : db_(&db), job_(std::move(job)), claim_(process_claim_token()) {}

Ledger::Ledger(Ledger&& other) noexcept
    : db_(other.db_),
      job_(std::move(other.job_)),
      version_(std::move(other.version_)),
      claim_(std::move(other.claim_)),
      run_id_(other.run_id_),
      begin_(std::move(other.begin_)),
      commit_(std::move(other.commit_)),
      rollback_(std::move(other.rollback_)),
      in_txn_(std::exchange(other.in_txn_, false)),
      find_task_(std::move(other.find_task_)),
      find_attempts_(std::move(other.find_attempts_)),
      insert_new_task_(std::move(other.insert_new_task_)),
      upsert_task_(std::move(other.upsert_task_)),
      bump_attempts_(std::move(other.bump_attempts_)),
      insert_attempt_(std::move(other.insert_attempt_)),
      end_attempt_(std::move(other.end_attempt_)),
      uncharge_(std::move(other.uncharge_)),
      set_state_(std::move(other.set_state_)),
      uncharge_all_(std::move(other.uncharge_all_)),
      set_wait_(std::move(other.set_wait_)),
      release_claims_(std::move(other.release_claims_)),
      release_claim_(std::move(other.release_claim_)) {}

Ledger::~Ledger() { rollback(); }

Expected<Ledger> Ledger::open(Database& db, const std::string& handler_identity, const std::string& policy_identity) {
  Ledger ledger(db, handler_identity);
  const Status prepared = prepare_all(db.handle(), {
      {&ledger.find_task_, "SELECT id, state, attempts, claim, version FROM tasks WHERE job = ?1 AND key = ?2 AND payload_sha256 = ?3"},
      {&ledger.find_attempts_,
       "SELECT a.n, a.ended_at IS NOT NULL, coalesce(a.kind, ''), coalesce(a.fingerprint, ''), a.charged, a.solo, "
       "r.died_of IS NOT NULL FROM attempts a LEFT JOIN runs r ON r.id = a.run_id WHERE a.task_id = ?1 ORDER BY a.n"},
      {&ledger.begin_, "BEGIN IMMEDIATE"},
      {&ledger.commit_, "COMMIT"},
      {&ledger.rollback_, "ROLLBACK"},
      {&ledger.insert_new_task_,
       "INSERT INTO tasks (job, key, payload_sha256, payload_size, state, attempts, updated_at, claim) "
       "VALUES (?1, ?2, ?3, ?4, 'pending', 1, ?5, ?6) ON CONFLICT (job, key, payload_sha256) DO NOTHING"},
      {&ledger.upsert_task_,
       "INSERT INTO tasks (job, key, payload_sha256, payload_size, state, attempts, updated_at) "
       "VALUES (?1, ?2, ?3, ?4, 'pending', 0, ?5) "
       "ON CONFLICT (job, key, payload_sha256) DO UPDATE SET updated_at = excluded.updated_at RETURNING id, state, claim"},
      {&ledger.bump_attempts_,
       "UPDATE tasks SET attempts = attempts + 1, state = 'pending', updated_at = ?2, claim = ?3, next_retry_at = NULL, "
       "held = 0 WHERE id = ?1 RETURNING attempts"},
      {&ledger.insert_attempt_,
       "INSERT INTO attempts (task_id, n, run_id, started_at, solo) VALUES (?1, ?2, ?3, ?4, ?5)"},
      {&ledger.uncharge_all_, "UPDATE attempts SET charged = 0 WHERE task_id = ?1"},
      {&ledger.end_attempt_,
       "UPDATE attempts SET ended_at = ?3, kind = ?4, fingerprint = ?5, message = ?6, charged = ?7, stderr_tail = ?8 "
       "WHERE task_id = ?1 AND n = ?2 AND run_id = ?9"},
      {&ledger.uncharge_, "UPDATE attempts SET charged = 0 WHERE task_id = ?1 AND n = ?2"},
      {&ledger.set_state_,
       "UPDATE tasks SET state = ?2, updated_at = ?3, claim = CASE WHEN ?2 = 'pending' THEN claim ELSE NULL END, "
       "next_retry_at = CASE WHEN ?2 = 'pending' THEN next_retry_at ELSE NULL END, "
       "version = CASE WHEN ?2 = 'ok' THEN ?4 ELSE version END WHERE id = ?1"},
      {&ledger.set_wait_, "UPDATE tasks SET next_retry_at = ?2, held = ?3 WHERE id = ?1"},
      {&ledger.release_claims_, "UPDATE tasks SET claim = NULL WHERE claim = ?1"},
      {&ledger.release_claim_,
       "UPDATE tasks SET claim = NULL, held = 0, next_retry_at = NULL WHERE id = ?1 AND claim = ?2"},
  });
  if (!prepared) return Error{prepared.message()};
  auto run_id = insert_run(db, now_ms(), handler_identity, policy_identity);
  if (!run_id) return Error{run_id.error()};
  ledger.run_id_ = *run_id;
  return ledger;
}

Expected<std::int64_t> insert_run(Database& db, std::int64_t now, const std::string& handler_identity,
                                  const std::string& policy_identity) {
  auto stmt = Statement::prepare(db.handle(),
                                 "INSERT INTO runs (started_at, pid, host, handler_identity, policy_identity) "
                                 "VALUES (?1, ?2, ?3, ?4, ?5) RETURNING id");
  if (!stmt) return Error{stmt.error()};
  auto row = stmt->bind(1, now)
                 .bind(2, std::int64_t{::getpid()})
                 .bind(3, std::string_view(host_name()))
                 .bind(4, std::string_view(handler_identity))
                 .bind(5, std::string_view(policy_identity))
                 .step();
  if (!row) return Error{row.error()};
  return stmt->column_int(0);
}

Expected<std::optional<LedgerTask>> Ledger::find(const std::string& key, const std::string& sha) {
  auto row = find_task_.bind(1, std::string_view(job_)).bind(2, std::string_view(key)).bind(3, std::string_view(sha)).step();
  if (!row) return Error{row.error()};
  if (!*row) {
    find_task_.reset();
    return std::optional<LedgerTask>();
  }
  LedgerTask t;
  t.id = find_task_.column_int(0);
  auto state = read_state(find_task_, 1);
  t.attempts = static_cast<std::uint32_t>(find_task_.column_int(2));
  if (state && *state == TaskState::kPending) t.claimed_elsewhere = claim_of_another(find_task_, 3, claim_);
  t.version = find_task_.column_text(4);
  find_task_.reset();
  if (!state) return Error{state.error()};
  t.state = *state;
  if (t.state == TaskState::kOk || t.state == TaskState::kQuarantined || !t.claimed_elsewhere.empty()) {
    return std::optional<LedgerTask>(std::move(t));
  }
  find_attempts_.bind(1, t.id);
  const Status read = find_attempts_.each_row([&] {
    AttemptSummary s;
    s.n = static_cast<std::uint32_t>(find_attempts_.column_int(0));
    s.finished = find_attempts_.column_int(1) != 0;
    s.kind = find_attempts_.column_text(2);
    s.fingerprint = find_attempts_.column_text(3);
    s.charged = find_attempts_.column_int(4) != 0;
    s.solo = find_attempts_.column_int(5) != 0;
    s.lost_with_evidence = !s.finished && find_attempts_.column_int(6) != 0;
    t.history.push_back(std::move(s));
  });
  if (!read) return Error{read.message()};
  find_attempts_.reset();
  return std::optional<LedgerTask>(std::move(t));
}

Status Ledger::record_deaths(const std::string& store_dir) {
  const std::vector<DeathNote> notes = read_death_notes(store_dir);
  if (notes.empty()) return Status::ok();
  auto update = Statement::prepare(db_->handle(), "UPDATE runs SET died_of = ?2 WHERE id = ?1");
  if (!update) return Status::error(update.error());
  for (const DeathNote& note : notes) {
    if (auto s = update->bind(1, note.run_id).bind(2, std::string_view(note.cause)).run(); !s) return s;
    update->reset();
  }
  // Only now that the ledger has them: a note is never lost between the two.
  for (const DeathNote& note : notes) ::unlink(note.file.c_str());
  return Status::ok();
}

Status Ledger::begin() {
  if (in_txn_) return Status::ok();
  // IMMEDIATE: a concurrent writer waits in the busy handler instead of
  // failing half-way through.
  if (auto s = begin_.run(); !s) return Status::error("store: cannot start a transaction: " + reason(s));
  in_txn_ = true;
  return Status::ok();
}

Status Ledger::commit() {
  if (!in_txn_) return Status::ok();
  if (auto s = commit_.run(); !s) {
    rollback();
    return Status::error("store: commit failed: " + reason(s));
  }
  in_txn_ = false;
  return Status::ok();
}

void Ledger::rollback() {
  if (!in_txn_) return;
  in_txn_ = false;
  // A failed COMMIT may have rolled back already: then there is nothing to
  // roll back, and the error says so; either way no transaction is open.
  if (::sqlite3_get_autocommit(db_->handle()) == 0) (void)rollback_.run();
}

Expected<std::optional<StartedAttempt>> Ledger::start_new_task(const std::string& key, const std::string& sha,
                                                              std::int64_t size, std::int64_t now, bool solo) {
  // No RETURNING: SQLite opens a temporary b-tree per execution for it
  // (seen in the supervisor's profile); changes() and the rowid suffice.
  if (auto s = insert_new_task_.bind(1, std::string_view(job_))
                   .bind(2, std::string_view(key))
                   .bind(3, std::string_view(sha))
                   .bind(4, size)
                   .bind(5, now)
                   .bind(6, std::string_view(claim_))
                   .run();
      !s) {
    return Error{s.message()};
  }
  if (::sqlite3_changes(db_->handle()) == 0) return std::optional<StartedAttempt>();  // it exists: start_attempt reads it
  StartedAttempt started;
  started.task_id = ::sqlite3_last_insert_rowid(db_->handle());
  started.n = 1;
  started.state = TaskState::kPending;
  if (auto s = insert_attempt(started, now, solo); !s) return Error{s.message()};
  return std::optional<StartedAttempt>(std::move(started));
}

Status Ledger::insert_attempt(const StartedAttempt& started, std::int64_t now, bool solo) {
  return insert_attempt_.bind(1, started.task_id)
      .bind(2, static_cast<std::int64_t>(started.n))
      .bind(3, run_id_)
      .bind(4, now)
      .bind(5, static_cast<std::int64_t>(solo ? 1 : 0))
      .run();
}

Expected<StartedAttempt> Ledger::start_attempt(const std::string& key, const std::string& sha, std::int64_t size,
                                               std::int64_t now, bool solo, bool fresh_budget, bool rerun_ok) {
  auto row = upsert_task_.bind(1, std::string_view(job_))
                 .bind(2, std::string_view(key))
                 .bind(3, std::string_view(sha))
                 .bind(4, size)
                 .bind(5, now)
                 .step();
  if (!row) return Error{row.error()};
  StartedAttempt started;
  started.task_id = upsert_task_.column_int(0);
  auto state = read_state(upsert_task_, 1);
  started.claimed_elsewhere = claim_of_another(upsert_task_, 2, claim_);
  upsert_task_.reset();
  if (!state) return Error{state.error()};
  started.state = *state;
  if ((started.state == TaskState::kOk && !rerun_ok) || started.state == TaskState::kQuarantined) {
    started.claimed_elsewhere.clear();
    return started;  // finished elsewhere meanwhile
  }
  if (!started.claimed_elsewhere.empty()) return started;  // running elsewhere
  if (fresh_budget) {
    if (auto s = uncharge_all_.bind(1, started.task_id).run(); !s) return Error{s.message()};
  }
  auto bumped = bump_attempts_.bind(1, started.task_id).bind(2, now).bind(3, std::string_view(claim_)).step();
  if (!bumped) return Error{bumped.error()};
  started.n = static_cast<std::uint32_t>(bump_attempts_.column_int(0));
  started.state = TaskState::kPending;
  bump_attempts_.reset();
  if (auto s = insert_attempt(started, now, solo); !s) return Error{s.message()};
  return started;
}

Status Ledger::end_attempt(std::int64_t task_id, std::uint32_t n, std::int64_t now, const std::string& kind,
                           const std::string& fingerprint, const std::string& message, bool charged,
                           std::string_view stderr_tail) {
  if (stderr_tail.empty()) {
    end_attempt_.bind_null(8);
  } else {
    end_attempt_.bind_blob(8, stderr_tail);
  }
  return end_attempt_.bind(1, task_id)
      .bind(2, static_cast<std::int64_t>(n))
      .bind(3, now)
      .bind(4, std::string_view(kind))
      .bind(5, std::string_view(fingerprint))
      .bind(6, std::string_view(message))
      .bind(7, static_cast<std::int64_t>(charged ? 1 : 0))
      .bind(9, run_id_)
      .run();
}

Status Ledger::uncharge(std::int64_t task_id, std::uint32_t n) {
  return uncharge_.bind(1, task_id).bind(2, static_cast<std::int64_t>(n)).run();
}

Status Ledger::set_state(std::int64_t task_id, TaskState state, std::int64_t now) {
  return set_state_.bind(1, task_id).bind(2, to_string(state)).bind(3, now).bind(4, std::string_view(version_)).run();
}

Status Ledger::set_wait(std::int64_t task_id, std::int64_t next_retry_at, bool held) {
  set_wait_.bind(1, task_id).bind(3, static_cast<std::int64_t>(held ? 1 : 0));
  if (next_retry_at != 0) set_wait_.bind(2, next_retry_at);
  else set_wait_.bind_null(2);
  return set_wait_.run();
}

Status Ledger::release_claims() { return release_claims_.bind(1, std::string_view(claim_)).run(); }

Status Ledger::release_claim(std::int64_t task_id) {
  return release_claim_.bind(1, task_id).bind(2, std::string_view(claim_)).run();
}

}  // namespace pillbox::store
