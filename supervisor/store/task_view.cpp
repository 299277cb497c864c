#include "supervisor/store/task_view.h"

#include "shared/enum_text.h"
#include "supervisor/store/statement.h"

namespace pillbox::store {
namespace {

// The view of a row, in SQL, so that --state filters in the query.
constexpr const char* kViewSql =
    "CASE WHEN t.state = 'pending' AND t.held = 1 THEN 'held' "
    "WHEN t.state = 'pending' AND t.next_retry_at IS NOT NULL THEN 'retrying' ELSE t.state END";

}  // namespace

std::string_view to_string(TaskView view) {
  switch (view) {
    case TaskView::kPending: return "pending";
    case TaskView::kRetrying: return "retrying";
    case TaskView::kHeld: return "held";
    case TaskView::kGaveUp: return "gave-up";
    case TaskView::kOk: return "ok";
    case TaskView::kQuarantined: return "quarantined";
  }
  return "unknown";
}

std::optional<TaskView> task_view_from_string(std::string_view text) { return enum_from_text(kAllTaskViews, text); }

Status each_task(Database& db, const TaskFilter& f, const std::function<bool(const TaskRow&)>& fn) {
  // The last attempt by the primary key (task_id, n); the newest record by
  // the quarantine's task index.
  std::string sql = std::string("SELECT t.id, t.job, t.key, t.payload_sha256, t.payload_size, ") + kViewSql +
                    ", t.attempts, a.n IS NOT NULL, a.ended_at IS NOT NULL, coalesce(a.kind, ''), "
                    "coalesce(a.fingerprint, ''), coalesce(t.next_retry_at, 0), "
                    "coalesce((SELECT max(q.id) FROM quarantine q WHERE q.task_id = t.id), 0), coalesce(t.claim, ''), "
                    "t.updated_at, coalesce(res.record_id, 0), coalesce(res.revision, 0) FROM tasks t "
                    "LEFT JOIN attempts a ON a.task_id = t.id AND "
                    "a.n = (SELECT max(n) FROM attempts WHERE task_id = t.id) "
                    "LEFT JOIN results res ON res.task_id = t.id AND t.state = 'ok' WHERE 1";
  if (f.view) sql += std::string(" AND ") + kViewSql + " = ?1";
  if (f.key) sql += " AND t.key = ?2";
  // The job is the handler's name, then its arguments after a space.
  if (f.handler) sql += " AND (t.job = ?3 OR substr(t.job, 1, length(?3) + 1) = ?3 || ' ')";
  sql += " ORDER BY t.key, t.id LIMIT ?4";
  auto stmt = Statement::prepare(db.handle(), sql);
  if (!stmt) return Status::error(stmt.error());
  if (f.view) stmt->bind(1, to_string(*f.view));
  if (f.key) stmt->bind(2, std::string_view(*f.key));
  if (f.handler) stmt->bind(3, std::string_view(*f.handler));
  stmt->bind(4, f.limit);
  return stmt->each_row([&]() -> Expected<bool> {
    TaskRow r;
    int c = 0;
    r.id = stmt->column_int(c++);
    r.job = stmt->column_text(c++);
    r.key = stmt->column_text(c++);
    r.payload_sha256 = stmt->column_text(c++);
    r.payload_size = stmt->column_int(c++);
    const std::string view = stmt->column_text(c++);
    auto known = task_view_from_string(view);
    if (!known) return Error{"unknown task state '" + view + "' in the ledger (a newer pillbox wrote it?)"};
    r.view = *known;
    r.attempts = stmt->column_int(c++);
    const bool attempted = stmt->column_int(c++) != 0;
    const bool ended = stmt->column_int(c++) != 0;
    r.last_kind = stmt->column_text(c++);
    if (attempted && !ended) r.last_kind = "unfinished";
    r.last_fingerprint = stmt->column_text(c++);
    r.next_retry_at = stmt->column_int(c++);
    r.record_id = stmt->column_int(c++);
    r.claim = stmt->column_text(c++);
    r.updated_at = stmt->column_int(c++);
    r.result_origin.record_id = stmt->column_int(c++);
    r.result_origin.revision = stmt->column_int(c++);
    return fn(r);
  });
}

Expected<Forgotten> forget_tasks(Database& db, const TaskFilter& filter) {
  std::vector<std::int64_t> ids;
  if (auto s = each_task(db, filter, [&](const TaskRow& r) {
        if (r.view != TaskView::kOk && r.view != TaskView::kQuarantined) ids.push_back(r.id);
        return true;
      });
      !s) {
    return Error{s.message()};
  }
  auto remove = Statement::prepare(db.handle(),
                                   "DELETE FROM tasks WHERE id = ?1 AND state NOT IN ('ok', 'quarantined') AND claim IS "
                                   "NULL AND NOT EXISTS (SELECT 1 FROM quarantine q WHERE q.task_id = tasks.id)");
  if (!remove) return Error{remove.error()};
  if (auto s = db.exec("BEGIN IMMEDIATE"); !s) return Error{s.message()};
  Forgotten f;
  for (std::int64_t id : ids) {
    remove->bind(1, id);
    if (auto s = remove->run(); !s) {
      (void)db.exec("ROLLBACK");
      return Error{s.message()};
    }
    if (::sqlite3_changes(db.handle()) > 0) ++f.removed;
    else ++f.kept;
  }
  if (auto s = db.exec("COMMIT"); !s) {
    (void)db.exec("ROLLBACK");
    return Error{s.message()};
  }
  return f;
}

Expected<std::int64_t> release_claims_of_host(Database& db, const std::string& host) {
  auto stmt = Statement::prepare(db.handle(),
                                 "UPDATE tasks SET claim = NULL WHERE claim IS NOT NULL AND "
                                 "substr(claim, 1, length(?1) + 1) = ?1 || ':' RETURNING id");
  if (!stmt) return Error{stmt.error()};
  stmt->bind(1, std::string_view(host));
  std::int64_t released = 0;
  const Status read = stmt->each_row([&] { ++released; });
  if (!read) return Error{read.message()};
  return released;
}

}  // namespace pillbox::store
