#include "supervisor/store/replay_store.h"

#include <algorithm>
#include <utility>

#include "supervisor/store/ledger.h"
#include "supervisor/store/process_claim.h"
#include "supervisor/store/statement.h"
#include "supervisor/store/task_state.h"

namespace pillbox::store {
std::string ReplayStore::claim_token() { return process_claim_token(); }

Expected<std::string> ReplayStore::claim_of(Database& db, std::int64_t id) {
  auto stmt = Statement::prepare(db.handle(), "SELECT coalesce(replay_claim, '') FROM quarantine WHERE id = ?1");
  if (!stmt) return Error{stmt.error()};
  auto row = stmt->bind(1, id).step();
  if (!row) return Error{row.error()};
  return *row ? stmt->column_text(0) : std::string();
}

Expected<std::size_t> ReplayStore::recover_abandoned(std::int64_t now, const std::string& actor) {
  auto stmt = Statement::prepare(db_->handle(),
                                 "SELECT id, coalesce(replay_claim, '') FROM quarantine WHERE status = 'replaying'");
  if (!stmt) return Error{stmt.error()};
  std::vector<std::pair<std::int64_t, std::string>> gone;
  const Status read = stmt->each_row([&] {
    const std::string claim = stmt->column_text(1);
    // Another host's claim cannot be checked from here; a live one is still running.
    if (claim_holder(claim) == ClaimHolder::kGone) gone.emplace_back(stmt->column_int(0), claim);
  });
  if (!read) return Error{read.message()};
  stmt->reset();
  for (const auto& [id, claim] : gone) {
    auto txn = Transaction::begin(db_->handle());
    if (!txn) return Error{txn.error()};
    auto back = Statement::prepare(db_->handle(),
                                   "UPDATE quarantine SET status = coalesce(status_before_replay, 'quarantined'), "
                                   "replay_claim = NULL, updated_at = ?2 WHERE id = ?1 AND replay_claim = ?3");
    if (!back) return Error{back.error()};
    if (auto s = back->bind(1, id).bind(2, now).bind(3, std::string_view(claim)).run(); !s) return Error{s.message()};
    if (auto s = quarantine_->audit(id, now, actor, "replay abandoned",
                                    "the replay that claimed it (" + claim + ") is gone; back to its status");
        !s) {
      return Error{s.message()};
    }
    if (auto s = txn->commit(); !s) return Error{s.message()};
  }
  return gone.size();
}

Expected<std::vector<QuarantineRecord>> ReplayStore::select(const ReplaySelection& sel, std::vector<std::string>& skipped) {
  std::vector<QuarantineRecord> out;
  if (!sel.ids.empty()) {
    for (std::int64_t id : sel.ids) {
      auto r = quarantine_->get(id);
      if (!r) return Error{r.error()};
      if (!*r) {
        return Error{"no quarantine record " + std::to_string(id) + " in this store (see: pillbox quarantine list)",
                     ErrorCode::kUsage};
      }
      if (!replayable((*r)->status, sel.scope())) {
        skipped.push_back("record " + std::to_string(id) + " " +
                          not_replayable_why((*r)->status, sel.scope(), std::to_string(id)));
        continue;
      }
      out.push_back(std::move(**r));
    }
    return out;
  }
  std::size_t not_open = 0;
  auto s = quarantine_->each(sel.filter, [&](const QuarantineRecord& r) {
    if (replayable(r.status, sel.scope())) out.push_back(r);
    else ++not_open;
    return true;
  });
  if (!s) return Error{s.message()};
  if (not_open > 0) {
    skipped.push_back(std::to_string(not_open) + " matching records " + not_replayable_words(sel.scope()));
  }
  std::reverse(out.begin(), out.end());  // oldest first
  return out;
}

Expected<std::vector<std::int64_t>> ReplayStore::claim(const std::vector<std::int64_t>& ids, ReplayScope scope,
                                                       std::int64_t now) {
  auto txn = Transaction::begin(db_->handle());
  if (!txn) return Error{txn.error()};
  auto stmt = Statement::prepare(
      db_->handle(),
      "UPDATE quarantine SET status_before_replay = CASE WHEN status = 'replaying' THEN status_before_replay ELSE status END, "
      "status = 'replaying', replay_claim = ?2, updated_at = ?3 WHERE id = ?1 AND status IN " +
          sql_statuses([scope](RecordStatus s) { return replayable(s, scope); }));
  if (!stmt) return Error{stmt.error()};
  const std::string token = claim_token();
  std::vector<std::int64_t> claimed;
  for (std::int64_t id : ids) {
    if (auto s = stmt->bind(1, id).bind(2, std::string_view(token)).bind(3, now).run(); !s) {
      return Error{s.message()};
    }
    if (::sqlite3_changes(db_->handle()) == 1) claimed.push_back(id);
  }
  if (auto s = txn->commit(); !s) return Error{s.message()};
  return claimed;
}

Status ReplayStore::release(std::int64_t id, std::int64_t now) {
  auto stmt = Statement::prepare(db_->handle(),
                                 "UPDATE quarantine SET status = coalesce(status_before_replay, 'quarantined'), "
                                 "replay_claim = NULL, updated_at = ?2 WHERE id = ?1 AND status = 'replaying' "
                                 "AND replay_claim = ?3");
  if (!stmt) return Status::error(stmt.error());
  return stmt->bind(1, id).bind(2, now).bind(3, std::string_view(claim_token())).run();
}

Expected<std::int64_t> ReplayStore::start_run(const std::string& handler_identity, const std::string& policy_identity,
                                              std::int64_t now) {
  return insert_run(*db_, now, handler_identity, policy_identity);
}

Status ReplayStore::finish(const QuarantineRecord& record, ReplayVerdict verdict, const ReplayAttempt& a, std::int64_t run_id,
                           const std::string& actor, const std::string& detail, std::int64_t revision,
                           const std::string& output, std::uint64_t keep_limit) {
  if (!results_) {
    auto opened = ResultStore::open(*db_);
    if (!opened) return Status::error(opened.error());
    results_.emplace(std::move(*opened));
  }
  auto txn = Transaction::begin(db_->handle());
  if (!txn) return Status::error(txn.error());
  auto attempt = Statement::prepare(
      db_->handle(),
      "INSERT INTO attempts (task_id, n, run_id, started_at, ended_at, kind, fingerprint, message, charged, solo) "
      "VALUES (?1, (SELECT coalesce(max(n), 0) + 1 FROM attempts WHERE task_id = ?1), ?2, ?3, ?4, ?5, ?6, ?7, 0, 0)");
  if (!attempt) return Status::error(attempt.error());
  if (auto s = attempt->bind(1, record.entry.task_id)
                   .bind(2, run_id)
                   .bind(3, a.started_at)
                   .bind(4, a.ended_at)
                   .bind(5, std::string_view(a.kind))
                   .bind(6, std::string_view(a.fingerprint))
                   .bind(7, std::string_view(a.message))
                   .run();
      !s) {
    return s;
  }
  const bool resolved = verdict == ReplayVerdict::kResolved;
  bool undone = false;  // failed again after a replay of this record had made the task ok
  if (resolved) {
    if (auto s = results_->keep(record.entry.task_id, output, keep_limit, a.ended_at, ResultOrigin{record.id, revision});
        !s) {
      return s;
    }
  } else {
    auto dropped = results_->forget_replayed(record.entry.task_id, record.id);
    if (!dropped) return Status::error(dropped.error());
    undone = *dropped;
  }
  auto task = Statement::prepare(db_->handle(),
                                 "UPDATE tasks SET attempts = attempts + 1, updated_at = ?2, "
                                 "state = CASE WHEN ?3 OR ?4 THEN ?5 ELSE state END, "
                                 "next_retry_at = CASE WHEN ?3 THEN NULL ELSE next_retry_at END, "
                                 "held = CASE WHEN ?3 THEN 0 ELSE held END WHERE id = ?1");
  if (!task) return Status::error(task.error());
  if (auto s = task->bind(1, record.entry.task_id)
                   .bind(2, a.ended_at)
                   .bind(3, std::int64_t{resolved ? 1 : 0})
                   .bind(4, std::int64_t{undone ? 1 : 0})
                   .bind(5, to_string(resolved ? TaskState::kOk : TaskState::kQuarantined))
                   .run();
      !s) {
    return s;
  }
  auto status = Statement::prepare(db_->handle(),
                                   "UPDATE quarantine SET status = ?2, replay_claim = NULL, updated_at = ?3 WHERE id = ?1");
  if (!status) return Status::error(status.error());
  if (auto s = status->bind(1, record.id).bind(2, to_string(status_after(verdict))).bind(3, a.ended_at).run(); !s) {
    return s;
  }
  if (auto s = quarantine_->audit(record.id, a.ended_at, actor, "replayed", detail); !s) return s;
  return txn->commit();
}

}  // namespace pillbox::store
