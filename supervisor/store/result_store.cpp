#include "supervisor/store/result_store.h"

#include "shared/enum_text.h"

namespace pillbox::store {
namespace {

const char* const kColumns =
    "SELECT r.task_id, t.job, t.key, t.payload_sha256, r.size, r.status, r.created_at, "
    "CASE WHEN ?9 THEN r.data END, coalesce(r.record_id, 0), r.revision FROM results r JOIN tasks t ON t.id = r.task_id AND t.state = 'ok' ";

}  // namespace

std::string_view to_string(ResultStatus status) {
  switch (status) {
    case ResultStatus::kKept: return "kept";
    case ResultStatus::kEvicted: return "evicted";
    case ResultStatus::kTooLarge: return "too-large";
  }
  return "kept";
}

std::string describe(const ResultOrigin& origin) {
  if (!origin.from_replay()) return "run";
  const std::string record = "record " + std::to_string(origin.record_id);
  if (origin.revision > 0) return "patch " + std::to_string(origin.revision) + " of " + record;
  return "replay of " + record;
}

Expected<ResultStore> ResultStore::open(Database& db) {
  ResultStore rs(db);
  const Status prepared = prepare_all(db.handle(), {
      {&rs.upsert_,
       "INSERT INTO results (task_id, size, status, data, created_at, record_id, revision) "
       "VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7) "
       "ON CONFLICT (task_id) DO UPDATE SET size = excluded.size, status = excluded.status, data = excluded.data, "
       "created_at = excluded.created_at, record_id = excluded.record_id, revision = excluded.revision"},
      {&rs.total_, "SELECT bytes FROM results_total WHERE id = 1"},
      {&rs.oldest_, "SELECT task_id, size FROM results WHERE status = 'kept' ORDER BY created_at, task_id"},
      {&rs.evict_, "UPDATE results SET status = 'evicted', data = NULL WHERE task_id = ?1"},
      {&rs.of_task_, std::string(kColumns) + "WHERE r.task_id = ?1"},
      {&rs.forget_, "DELETE FROM results WHERE task_id = ?1 AND record_id = ?2"},
  });
  if (!prepared) return Error{prepared.message()};
  return rs;
}

Status ResultStore::keep(std::int64_t task_id, std::string_view bytes, std::uint64_t limit, std::int64_t now_ms,
                         const ResultOrigin& origin) {
  const bool fits = bytes.size() <= limit;
  upsert_.bind(1, task_id)
      .bind(2, static_cast<std::int64_t>(bytes.size()))
      .bind(3, to_string(fits ? ResultStatus::kKept : ResultStatus::kTooLarge))
      .bind(5, now_ms)
      .bind(7, origin.revision);
  if (fits) upsert_.bind_blob(4, bytes);
  else upsert_.bind_null(4);
  if (origin.from_replay()) upsert_.bind(6, origin.record_id);
  else upsert_.bind_null(6);
  return upsert_.run();
}

Expected<bool> ResultStore::forget_replayed(std::int64_t task_id, std::int64_t record_id) {
  if (auto s = forget_.bind(1, task_id).bind(2, record_id).run(); !s) {
    return Error{s.message()};
  }
  return ::sqlite3_changes(db_->handle()) > 0;
}

Expected<std::int64_t> ResultStore::kept_bytes() {
  auto row = total_.step();
  if (!row) return Error{row.error()};
  const std::int64_t total = *row ? total_.column_int(0) : 0;
  total_.reset();
  return total;
}

Expected<std::size_t> ResultStore::evict_over(std::uint64_t limit) {
  auto total = kept_bytes();
  if (!total) return Error{total.error()};
  if (*total <= static_cast<std::int64_t>(limit)) return std::size_t{0};
  // Oldest first, until what is left fits; the index on (created_at,
  // task_id) of the kept rows makes this a walk from the front.
  std::int64_t excess = *total - static_cast<std::int64_t>(limit);
  std::vector<std::int64_t> victims;
  const Status read = oldest_.each_row([&] {
    victims.push_back(oldest_.column_int(0));
    excess -= oldest_.column_int(1);
    return excess > 0;
  });
  oldest_.reset();
  if (!read) return Error{read.message()};
  for (const std::int64_t id : victims) {
    if (auto s = evict_.bind(1, id).run(); !s) return Error{s.message()};
  }
  return victims.size();
}

Status ResultStore::walk(Statement& stmt, bool with_data, const std::function<Status(StoredResult&)>& each) {
  stmt.bind(9, static_cast<std::int64_t>(with_data ? 1 : 0));
  const Status outcome = stmt.each_row([&] {
    StoredResult r;
    r.task_id = stmt.column_int(0);
    r.job = stmt.column_text(1);
    r.key = stmt.column_text(2);
    r.payload_sha256 = stmt.column_text(3);
    r.size = stmt.column_int(4);
    const std::string status = stmt.column_text(5);
    // The schema's CHECK keeps statuses to these; another is a newer pillbox's.
    const std::optional<ResultStatus> known = enum_from_text(kAllResultStatuses, status);
    if (!known) return Status::error("unknown result status '" + status + "' in the store");
    r.status = *known;
    r.created_at = stmt.column_int(6);
    if (!stmt.column_is_null(7)) r.data = stmt.column_text(7);
    r.origin.record_id = stmt.column_int(8);
    r.origin.revision = stmt.column_int(9);
    return each(r);
  });
  stmt.reset();
  return outcome;
}

Expected<std::vector<StoredResult>> ResultStore::read_rows(Statement& stmt, bool with_data) {
  std::vector<StoredResult> rows;
  auto s = walk(stmt, with_data, [&rows](StoredResult& r) {
    rows.push_back(std::move(r));
    return Status::ok();
  });
  if (!s) return Error{s.message()};
  return rows;
}

Expected<std::optional<StoredResult>> ResultStore::of_task(std::int64_t task_id) {
  of_task_.bind(1, task_id);
  auto rows = read_rows(of_task_, true);
  if (!rows) return Error{rows.error()};
  if (rows->empty()) return std::optional<StoredResult>();
  return std::optional<StoredResult>(std::move(rows->front()));
}

Expected<std::string> ResultStore::reused_key_payload(std::int64_t task_id) {
  auto stmt = Statement::prepare(db_->handle(),
                                 "SELECT t.payload_sha256 FROM tasks t WHERE t.id = ?1 AND EXISTS (SELECT 1 FROM tasks o "
                                 "WHERE o.key = t.key AND o.id < t.id AND o.payload_sha256 != t.payload_sha256)");
  if (!stmt) return Error{stmt.error()};
  auto row = stmt->bind(1, task_id).step();
  if (!row) return Error{row.error()};
  return *row ? stmt->column_text(0) : std::string();
}

Expected<std::vector<std::string>> ResultStore::task_states(const std::string& key) {
  auto stmt = Statement::prepare(db_->handle(),
                                 "SELECT state FROM tasks WHERE job IN (SELECT DISTINCT handler_identity FROM runs) "
                                 "AND key = ?1 ORDER BY id");
  if (!stmt) return Error{stmt.error()};
  stmt->bind(1, std::string_view(key));
  return stmt->rows([&] { return stmt->column_text(0); });
}

Expected<std::vector<StoredResult>> ResultStore::with_key(const std::string& key, bool with_data) {
  // Through the tasks' unique index (job, key, ...): the jobs are those of
  // the runs, a short list, so no scan of every task.
  auto stmt = Statement::prepare(db_->handle(), std::string(kColumns) +
                                                    "WHERE t.job IN (SELECT DISTINCT handler_identity FROM runs) "
                                                    "AND t.key = ?1 ORDER BY t.id");
  if (!stmt) return Error{stmt.error()};
  stmt->bind(1, std::string_view(key));
  return read_rows(*stmt, with_data);
}

Status ResultStore::for_each(bool with_data, const std::function<Status(const StoredResult&)>& each) {
  auto stmt = Statement::prepare(db_->handle(), std::string(kColumns) + "ORDER BY r.task_id");
  if (!stmt) return Status::error(stmt.error());
  return walk(*stmt, with_data, [&each](StoredResult& r) { return each(r); });
}

}  // namespace pillbox::store
