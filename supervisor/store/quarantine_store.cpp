#include "supervisor/store/quarantine_store.h"

#include <unistd.h>

#include <algorithm>
#include <chrono>

#include "supervisor/store/outcome_columns.h"

namespace pillbox::store {
namespace {

bool is_closed(RecordStatus status) { return !is_open(status); }

const std::string kColumns =
    std::string("id, task_id, key, source, handler, handler_identity, handler_args, exec_argv, policy_identity, "
                "policy, payload_sha256, payload_size, ") +
    kOutcomeColumns +
    ", status, repeats, created_at, updated_at, coalesce(reproduce_outcome, ''), "
    "reproduce_runs, reproduce_matches, coalesce(minimized_sha256, ''), origin, working_dir, stderr_tail";

// A status this build does not know (a newer pillbox's store) is an error,
// not a guess.
Expected<QuarantineRecord> read_record(const Statement& s) {
  QuarantineRecord r;
  int c = 0;
  r.id = s.column_int(c++);
  QuarantineEntry& e = r.entry;
  e.task_id = s.column_int(c++);
  e.key = s.column_text(c++);
  e.source = s.column_text(c++);
  e.handler = s.column_text(c++);
  e.handler_identity = s.column_text(c++);
  e.handler_args = s.column_text(c++);
  e.exec_argv = s.column_text(c++);
  e.policy_identity = s.column_text(c++);
  e.policy = s.column_text(c++);
  e.payload_sha256 = s.column_text(c++);
  e.payload_size = s.column_int(c++);
  read_outcome(s, c, e);
  const std::string status = s.column_text(c++);
  const std::optional<RecordStatus> known = record_status_from_string(status);
  if (!known) return Error{"quarantine record " + std::to_string(r.id) + " has an unknown status '" + status + "'"};
  r.status = *known;
  r.repeats = s.column_int(c++);
  r.created_at = s.column_int(c++);
  r.updated_at = s.column_int(c++);
  r.reproduce_verdict = s.column_text(c++);
  r.reproduce_runs = s.column_int(c++);
  r.reproduce_matches = s.column_int(c++);
  r.minimized_sha256 = s.column_text(c++);
  e.origin = s.column_text(c++);
  e.working_dir = s.column_text(c++);
  e.stderr_tail = s.column_text(c++);
  return r;
}

// The WHERE clause of a filter; parameters ?1..?8 (bind_filter binds them;
// callers number their own from ?20).
std::string where(const ListFilter& f) {
  std::string sql = " WHERE 1";
  if (f.status) sql += " AND status = ?1";
  if (f.kind) sql += " AND kind = ?2";
  if (f.fingerprint) sql += " AND fingerprint = ?3";
  if (f.key) sql += " AND key = ?4";
  if (f.since_ms) sql += " AND created_at >= ?5";
  if (f.source) sql += " AND source = ?6";
  if (f.handler) sql += " AND handler = ?7";
  if (f.raise_site) sql += " AND pillbox_raise_site_id(kind, crash_state, handler_identity) = ?8";
  return sql;
}

void bind_filter(Statement& stmt, const ListFilter& f) {
  if (f.status) stmt.bind(1, to_string(*f.status));
  if (f.kind) stmt.bind(2, std::string_view(*f.kind));
  if (f.fingerprint) stmt.bind(3, std::string_view(*f.fingerprint));
  if (f.key) stmt.bind(4, std::string_view(*f.key));
  if (f.since_ms) stmt.bind(5, *f.since_ms);
  if (f.source) stmt.bind(6, std::string_view(*f.source));
  if (f.handler) stmt.bind(7, std::string_view(*f.handler));
  if (f.raise_site) stmt.bind(8, std::string_view(*f.raise_site));
}

}  // namespace

std::int64_t now_ms() {
  return std::chrono::duration_cast<std::chrono::milliseconds>(std::chrono::system_clock::now().time_since_epoch())
      .count();
}

Expected<QuarantineStore> QuarantineStore::open(Database& db, const std::string& store_dir, std::int64_t max_records) {
  auto payloads = PayloadStore::open(db, store_dir);
  if (!payloads) return Error{payloads.error()};
  QuarantineStore qs(db, std::move(*payloads), max_records);
  const Status prepared = prepare_all(db.handle(), {
      {&qs.insert_,
       std::string("INSERT INTO quarantine (task_id, key, source, handler, handler_identity, handler_args, "
                   "exec_argv, policy_identity, policy, payload_sha256, payload_size, ") +
           kOutcomeColumns +
           ", status, created_at, updated_at, origin, working_dir, "
       "stderr_tail) VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11, ?12, ?13, ?14, ?15, ?16, ?17, ?18, ?19, "
       "?20, ?21, 'quarantined', ?22, ?22, ?23, ?24, ?25) "
       "RETURNING id"},
      {&qs.newest_of_fingerprint_, "SELECT id FROM quarantine WHERE fingerprint = ?1 ORDER BY created_at DESC LIMIT 1"},
      {&qs.fold_, "UPDATE quarantine SET repeats = repeats + 1, updated_at = ?2 WHERE id = ?1"},
      {&qs.audit_, "INSERT INTO audit (record_id, at, actor, action, detail) VALUES (?1, ?2, ?3, ?4, ?5)"},
      {&qs.evict_,
       "DELETE FROM quarantine WHERE id = (SELECT id FROM quarantine WHERE status IN " + sql_statuses(is_closed) +
           " ORDER BY created_at LIMIT 1) RETURNING id"},
      {&qs.open_record_of_task_,
       // "+status": look the task up by its index; without the "+" SQLite may
       // pick the status index and scan every open record (quadratic inserts).
       "SELECT id FROM quarantine WHERE task_id = ?1 AND +status IN " + sql_statuses(is_open) + " LIMIT 1"},
  });
  if (!prepared) return Error{prepared.message()};
  return qs;
}

Expected<std::int64_t> QuarantineStore::record_count() {
  return db_->query_int("SELECT count(*) FROM quarantine");
}

Expected<InsertResult> QuarantineStore::insert(const QuarantineEntry& e, std::string_view payload, std::int64_t now,
                                               const std::string& actor) {
  InsertResult result;
  auto mine = open_record_of_task_.bind(1, e.task_id).step();
  if (!mine) return Error{mine.error()};
  if (*mine) {
    result.id = open_record_of_task_.column_int(0);
    result.existing = true;
    open_record_of_task_.reset();
    return result;
  }
  open_record_of_task_.reset();
  auto known = newest_of_fingerprint_.bind(1, std::string_view(e.fingerprint)).step();
  if (!known) return Error{known.error()};
  const std::int64_t known_id = *known ? newest_of_fingerprint_.column_int(0) : 0;
  newest_of_fingerprint_.reset();
  result.new_fingerprint = known_id == 0;

  if (max_records_ > 0) {
    // Counted inside the transaction, so concurrent writers see each other.
    auto count = record_count();
    if (!count) return Error{count.error()};
    if (*count >= max_records_) {
      auto evicted = evict_.step();
      if (!evicted) return Error{evicted.error()};
      evict_.reset();
      if (!*evicted && known_id != 0) {
        if (auto s = fold_.bind(1, known_id).bind(2, now).run(); !s) return Error{s.message()};
        if (auto s = audit(known_id, now, actor, "repeat",
                           "store full (" + std::to_string(max_records_) + " records): key '" + e.key +
                               "' failed the same way; its payload " + e.payload_sha256 + " was not kept");
            !s) {
          return Error{s.message()};
        }
        result.id = known_id;
        result.folded = true;
        return result;
      }
    }
  }

  if (auto s = payloads_.put(payload, e.payload_sha256, now); !s) return Error{s.message()};
  const std::string_view texts[] = {e.key, e.source, e.handler, e.handler_identity, e.handler_args, e.exec_argv,
                                    e.policy_identity, e.policy, e.payload_sha256};
  int index = 1;
  insert_.bind(index++, e.task_id);
  for (std::string_view t : texts) insert_.bind(index++, t);   // ?2 .. ?10
  insert_.bind(11, e.payload_size);
  bind_outcome(insert_, 12, e);  // ?12 .. ?21
  insert_.bind(22, now);
  insert_.bind(23, std::string_view(e.origin));
  insert_.bind(24, std::string_view(e.working_dir));
  insert_.bind_blob(25, e.stderr_tail);
  auto row = insert_.step();
  if (!row) return Error{row.error()};
  result.id = insert_.column_int(0);
  insert_.reset();
  return result;
}

Expected<std::int64_t> QuarantineStore::add_repeats(const std::string& fingerprint, std::int64_t n, std::int64_t now,
                                                    const std::string& actor, const std::string& detail) {
  auto stmt = Statement::prepare(db_->handle(),
                                 "UPDATE quarantine SET repeats = repeats + ?2, updated_at = ?3 WHERE id = (SELECT id "
                                 "FROM quarantine WHERE fingerprint = ?1 AND status != 'resolved' ORDER BY created_at "
                                 "DESC, id DESC LIMIT 1) RETURNING id");
  if (!stmt) return Error{stmt.error()};
  auto row = stmt->bind(1, std::string_view(fingerprint)).bind(2, n).bind(3, now).step();
  if (!row) return Error{row.error()};
  if (!*row) return std::int64_t{0};
  const std::int64_t id = stmt->column_int(0);
  stmt->reset();
  if (!detail.empty()) {
    if (auto s = audit(id, now, actor, "repeat", detail); !s) return Error{s.message()};
  }
  return id;
}

Status QuarantineStore::audit(std::int64_t record_id, std::int64_t now, const std::string& actor,
                              const std::string& action, const std::string& detail) {
  return audit_.bind(1, record_id)
      .bind(2, now)
      .bind(3, std::string_view(actor))
      .bind(4, std::string_view(action))
      .bind(5, std::string_view(detail))
      .run();
}

Status QuarantineStore::each(const ListFilter& f, const std::function<bool(const QuarantineRecord&)>& fn) {
  auto stmt = Statement::prepare(db_->handle(), std::string("SELECT ") + kColumns + " FROM quarantine" + where(f) +
                                                    " ORDER BY created_at DESC, id DESC LIMIT ?20 OFFSET ?21");
  if (!stmt) return Status::error(stmt.error());
  bind_filter(*stmt, f);
  stmt->bind(20, f.limit).bind(21, f.offset);
  return stmt->each_row([&]() -> Expected<bool> {
    auto record = read_record(*stmt);
    if (!record) return Error{record.error()};
    return fn(*record);
  });
}

Expected<std::vector<QuarantineRecord>> QuarantineStore::list(const ListFilter& f) {
  std::vector<QuarantineRecord> out;
  if (auto s = each(f, [&](const QuarantineRecord& r) {
        out.push_back(r);
        return true;
      });
      !s) {
    return Error{s.message()};
  }
  return out;
}

Expected<std::int64_t> QuarantineStore::count(const ListFilter& f) {
  auto stmt = Statement::prepare(db_->handle(), "SELECT count(*) FROM quarantine" + where(f));
  if (!stmt) return Error{stmt.error()};
  bind_filter(*stmt, f);
  auto row = stmt->step();
  if (!row) return Error{row.error()};
  return stmt->column_int(0);
}

Expected<std::vector<FingerprintStats>> QuarantineStore::stats(const ListFilter& f) { return stats(f, now_ms()); }

Expected<std::vector<FingerprintStats>> QuarantineStore::stats(const ListFilter& f, std::int64_t now) {
  // Records per status: one column each, in the order of kAllRecordStatuses.
  std::string by_status;
  for (RecordStatus status : kAllRecordStatuses) by_status += ", sum(status = '" + std::string(to_string(status)) + "')";
  // The newest record of each group (ids grow with time) is its example.
  auto stmt = Statement::prepare(
      db_->handle(),
      "SELECT g.*, q.message, q.crash_state, q.handler_identity FROM (SELECT fingerprint, kind, count(*) AS records, "
      "sum(status IN " + sql_statuses(is_open) + "), sum(repeats), min(created_at), "
      "max(max(created_at, updated_at)) AS last, max(id) AS example" + by_status + " FROM quarantine" +
          where(f) + " GROUP BY fingerprint, kind) g JOIN quarantine q ON q.id = g.example "
                     "ORDER BY g.records DESC, g.last DESC");
  if (!stmt) return Error{stmt.error()};
  bind_filter(*stmt, f);
  auto out = stmt->rows([&] {
    FingerprintStats st;
    st.fingerprint = stmt->column_text(0);
    st.kind = stmt->column_text(1);
    st.records = stmt->column_int(2);
    st.open = stmt->column_int(3);
    st.repeats = stmt->column_int(4);
    st.first_ms = stmt->column_int(5);
    st.last_ms = stmt->column_int(6);
    st.example_id = stmt->column_int(7);
    int column = 8;
    for (RecordStatus status : kAllRecordStatuses) {
      if (const std::int64_t n = stmt->column_int(column++); n > 0) st.by_status[status] = n;
    }
    st.message = stmt->column_text(column++);
    st.crash_state = stmt->column_text(column++);
    st.handler_identity = stmt->column_text(column);
    return st;
  });
  if (!out) return out;
  if (auto s = count_by_day(f, now, *out); !s) return Error{s.message()};
  return out;
}

Status QuarantineStore::count_by_day(const ListFilter& f, std::int64_t now, std::vector<FingerprintStats>& groups) {
  // One pass over the records of the last kStatsDays days: the range on
  // created_at is quarantine_by_created's (or a filter's own index).
  const std::int64_t first_day = (now - now % kDayMs) - (kStatsDays - 1) * kDayMs;
  auto stmt = Statement::prepare(db_->handle(), "SELECT fingerprint, kind, (created_at - ?20) / " +
                                                    std::to_string(kDayMs) + ", count(*) FROM quarantine" + where(f) +
                                                    " AND created_at >= ?20 AND created_at < ?21 GROUP BY 1, 2, 3");
  if (!stmt) return Status::error(stmt.error());
  bind_filter(*stmt, f);
  stmt->bind(20, first_day).bind(21, first_day + kStatsDays * kDayMs);
  std::map<std::pair<std::string, std::string>, FingerprintStats*> by_group;
  for (FingerprintStats& g : groups) {
    g.by_day.assign(kStatsDays, 0);
    g.first_day_ms = first_day;
    by_group[{g.fingerprint, g.kind}] = &g;
  }
  return stmt->each_row([&] {
    const auto g = by_group.find({stmt->column_text(0), stmt->column_text(1)});
    const std::int64_t day = stmt->column_int(2);
    if (g != by_group.end() && day >= 0 && day < kStatsDays) g->second->by_day[day] = stmt->column_int(3);
  });
}

Expected<std::vector<AuditEntry>> QuarantineStore::audit_trail(std::int64_t record_id) {
  auto stmt = Statement::prepare(db_->handle(),
                                 "SELECT at, actor, action, detail FROM audit WHERE record_id = ?1 ORDER BY at, id");
  if (!stmt) return Error{stmt.error()};
  stmt->bind(1, record_id);
  return stmt->rows([&] {
    return AuditEntry{stmt->column_int(0), stmt->column_text(1), stmt->column_text(2), stmt->column_text(3)};
  });
}

Expected<std::vector<AttemptRow>> QuarantineStore::attempts(std::int64_t task_id) {
  auto stmt = Statement::prepare(db_->handle(),
                                 "SELECT n, run_id, started_at, coalesce(ended_at, 0), coalesce(kind, ''), "
                                 "coalesce(fingerprint, ''), coalesce(message, ''), charged, solo, coalesce(stderr_tail, x'') "
                                 "FROM attempts "
                                 "WHERE task_id = ?1 ORDER BY n");
  if (!stmt) return Error{stmt.error()};
  stmt->bind(1, task_id);
  return stmt->rows([&] {
    AttemptRow a;
    a.n = stmt->column_int(0);
    a.run_id = stmt->column_int(1);
    a.started_at = stmt->column_int(2);
    a.ended_at = stmt->column_int(3);
    a.kind = stmt->column_text(4);
    a.fingerprint = stmt->column_text(5);
    a.message = stmt->column_text(6);
    a.charged = stmt->column_int(7) != 0;
    a.solo = stmt->column_int(8) != 0;
    a.stderr_tail = stmt->column_text(9);
    return a;
  });
}

Expected<bool> QuarantineStore::take_back(std::int64_t id, std::int64_t now, const std::string& actor,
                                          const std::string& action, const std::string& detail) {
  auto stmt = Statement::prepare(db_->handle(),
                                 "UPDATE quarantine SET status = 'discarded', updated_at = ?2 "
                                 "WHERE id = ?1 AND status = 'quarantined'");
  if (!stmt) return Error{stmt.error()};
  if (auto s = stmt->bind(1, id).bind(2, now).run(); !s) return Error{s.message()};
  if (::sqlite3_changes(db_->handle()) == 0) return false;
  if (auto s = audit(id, now, actor, action, detail); !s) return Error{s.message()};
  return true;
}

Status QuarantineStore::update_audited(std::int64_t id, const std::string& update,
                                       const std::function<void(Statement&)>& bind, std::int64_t now,
                                       const std::string& actor, const std::string& action, const std::string& detail) {
  auto txn = Transaction::begin(db_->handle());
  if (!txn) return Status::error(txn.error());
  auto stmt = Statement::prepare(db_->handle(), update);
  if (!stmt) return Status::error(stmt.error());
  bind(stmt->bind(1, id));
  if (auto s = stmt->run(); !s) return s;
  if (::sqlite3_changes(db_->handle()) == 0) return Status::error("no quarantine record " + std::to_string(id));
  if (auto s = audit(id, now, actor, action, detail); !s) return s;
  return txn->commit();
}

Status QuarantineStore::set_status(std::int64_t id, RecordStatus status, std::int64_t now,
                                   const std::string& actor, const std::string& action, const std::string& detail) {
  return update_audited(
      id, "UPDATE quarantine SET status = ?2, updated_at = ?3 WHERE id = ?1",
      [&](Statement& s) { s.bind(2, to_string(status)).bind(3, now); }, now, actor, action, detail);
}

Expected<bool> QuarantineStore::change_status(std::int64_t id, RecordStatus from, RecordStatus to, std::int64_t now,
                                              const std::string& actor, const std::string& action,
                                              const std::string& detail) {
  auto stmt = Statement::prepare(db_->handle(),
                                 "UPDATE quarantine SET status = ?3, updated_at = ?4 WHERE id = ?1 AND status = ?2 "
                                 "AND replay_claim IS NULL");
  if (!stmt) return Error{stmt.error()};
  if (auto s = stmt->bind(1, id).bind(2, to_string(from)).bind(3, to_string(to)).bind(4, now).run(); !s) {
    return Error{s.message()};
  }
  if (::sqlite3_changes(db_->handle()) == 0) return false;
  if (auto s = audit(id, now, actor, action, detail); !s) return Error{s.message()};
  return true;
}

Expected<std::optional<QuarantineRecord>> QuarantineStore::get(std::int64_t id) {
  auto stmt = Statement::prepare(db_->handle(), std::string("SELECT ") + kColumns + " FROM quarantine WHERE id = ?1");
  if (!stmt) return Error{stmt.error()};
  auto row = stmt->bind(1, id).step();
  if (!row) return Error{row.error()};
  if (!*row) return std::optional<QuarantineRecord>();
  auto record = read_record(*stmt);
  if (!record) return Error{record.error()};
  return std::optional<QuarantineRecord>(std::move(*record));
}

Expected<std::vector<AttemptTally>> QuarantineStore::attempt_tally(std::int64_t task_id) {
  auto stmt = Statement::prepare(db_->handle(),
                                 "SELECT coalesce(kind, 'unfinished'), count(*), min(started_at), max(started_at) "
                                 "FROM attempts WHERE task_id = ?1 GROUP BY 1 ORDER BY 3");
  if (!stmt) return Error{stmt.error()};
  stmt->bind(1, task_id);
  return stmt->rows([&] {
    return AttemptTally{stmt->column_text(0), stmt->column_int(1), stmt->column_int(2), stmt->column_int(3)};
  });
}

Status QuarantineStore::record_reproduction(std::int64_t id, const std::string& verdict, std::int64_t runs,
                                            std::int64_t matches, std::int64_t now, const std::string& actor,
                                            const std::string& detail) {
  return update_audited(
      id,
      "UPDATE quarantine SET reproduce_outcome = ?2, reproduce_runs = ?3, reproduce_matches = ?4, updated_at = ?5 "
      "WHERE id = ?1",
      [&](Statement& s) { s.bind(2, std::string_view(verdict)).bind(3, runs).bind(4, matches).bind(5, now); }, now,
      actor, "reproduced", detail);
}

Expected<std::optional<MinimizeState>> QuarantineStore::minimize_state(std::int64_t id) {
  auto stmt = Statement::prepare(db_->handle(),
                                 "SELECT best_sha256, runs, elapsed_ms, finished FROM minimize_state WHERE record_id = ?1");
  if (!stmt) return Error{stmt.error()};
  auto row = stmt->bind(1, id).step();
  if (!row) return Error{row.error()};
  if (!*row) return std::optional<MinimizeState>();
  return std::optional<MinimizeState>(
      MinimizeState{stmt->column_text(0), stmt->column_int(1), stmt->column_int(2), stmt->column_int(3) != 0});
}

Status QuarantineStore::save_minimize_state(std::int64_t id, std::string_view best, const MinimizeState& state,
                                            std::int64_t now) {
  auto txn = Transaction::begin(db_->handle());
  if (!txn) return Status::error(txn.error());
  if (auto s = payloads_.put(best, state.best_sha256, now); !s) return s;
  auto stmt = Statement::prepare(db_->handle(),
                                 "INSERT INTO minimize_state (record_id, best_sha256, runs, elapsed_ms, finished, updated_at) "
                                 "VALUES (?1, ?2, ?3, ?4, ?5, ?6) ON CONFLICT (record_id) DO UPDATE SET "
                                 "best_sha256 = ?2, runs = ?3, elapsed_ms = ?4, finished = ?5, updated_at = ?6");
  if (!stmt) return Status::error(stmt.error());
  if (auto s = stmt->bind(1, id)
                   .bind(2, std::string_view(state.best_sha256))
                   .bind(3, state.runs)
                   .bind(4, state.elapsed_ms)
                   .bind(5, std::int64_t{state.finished ? 1 : 0})
                   .bind(6, now)
                   .run();
      !s) {
    return s;
  }
  return txn->commit();
}

Status QuarantineStore::clear_minimize_state(std::int64_t id) {
  auto stmt = Statement::prepare(db_->handle(), "DELETE FROM minimize_state WHERE record_id = ?1");
  if (!stmt) return Status::error(stmt.error());
  return stmt->bind(1, id).run();
}

Status QuarantineStore::record_minimized(std::int64_t id, const std::string& sha256, std::int64_t now,
                                         const std::string& actor, const std::string& detail) {
  return update_audited(
      id, "UPDATE quarantine SET minimized_sha256 = ?2, updated_at = ?3 WHERE id = ?1",
      [&](Statement& s) { s.bind(2, std::string_view(sha256)).bind(3, now); }, now, actor, "minimized", detail);
}

namespace {

// "created_at < ?1 [AND status IN (?2, ...)]": the records a purge takes.
std::string purge_condition(const std::vector<RecordStatus>& statuses) {
  std::string sql = "created_at < ?1";
  if (!statuses.empty()) {
    sql += " AND status IN (";
    for (std::size_t i = 0; i < statuses.size(); ++i) sql += (i ? ", ?" : "?") + std::to_string(i + 2);
    sql += ")";
  }
  return sql;
}

void bind_purge_condition(Statement& stmt, std::int64_t cutoff_ms, const std::vector<RecordStatus>& statuses) {
  stmt.bind(1, cutoff_ms);
  for (std::size_t i = 0; i < statuses.size(); ++i) stmt.bind(static_cast<int>(i + 2), to_string(statuses[i]));
}

}  // namespace

Expected<std::vector<PurgeCandidate>> QuarantineStore::purge_candidates(std::int64_t cutoff_ms,
                                                                        const std::vector<RecordStatus>& statuses) {
  auto stmt = Statement::prepare(db_->handle(), "SELECT id, status, kind, key FROM quarantine WHERE " +
                                                    purge_condition(statuses) + " ORDER BY created_at, id");
  if (!stmt) return Error{stmt.error()};
  bind_purge_condition(*stmt, cutoff_ms, statuses);
  return stmt->rows([&] {
    PurgeCandidate c;
    c.id = stmt->column_int(0);
    c.status = record_status_from_string(stmt->column_text(1)).value_or(RecordStatus::kQuarantined);
    c.kind = stmt->column_text(2);
    c.key = stmt->column_text(3);
    return c;
  });
}

Expected<PurgeResult> QuarantineStore::purge(std::int64_t cutoff_ms, const std::vector<RecordStatus>& statuses,
                                             std::size_t max_open) {
  auto txn = Transaction::begin(db_->handle());
  if (!txn) return Error{txn.error()};
  auto stmt = Statement::prepare(db_->handle(),
                                 "DELETE FROM quarantine WHERE " + purge_condition(statuses) + " RETURNING task_id, status, id");
  if (!stmt) return Error{stmt.error()};
  bind_purge_condition(*stmt, cutoff_ms, statuses);
  PurgeResult result;
  std::vector<std::int64_t> tasks;
  const Status read = stmt->each_row([&] {
    ++result.records;
    tasks.push_back(stmt->column_int(0));
    result.ids.push_back(stmt->column_int(2));
    const auto status = record_status_from_string(stmt->column_text(1));
    if (!status || is_open(*status)) ++result.open_records;
  });
  if (!read) return Error{read.message()};
  stmt->reset();
  std::sort(result.ids.begin(), result.ids.end());  // RETURNING's order is SQLite's to choose
  if (result.open_records > max_open) {  // the transaction rolls back: nothing deleted
    return Error{std::to_string(result.open_records) + " of these records are open now, more than the " +
                     std::to_string(max_open) + " confirmed; nothing was deleted (look again: --dry-run)",
                 ErrorCode::kUsage};
  }
  // The ledger forgets a quarantined task whose evidence is gone: a later
  // run over the same input runs it again (and quarantines it anew, with
  // fresh evidence) instead of skipping it with nothing left to show.
  auto forget = Statement::prepare(db_->handle(),
                                   "DELETE FROM tasks WHERE id = ?1 AND state = 'quarantined' AND NOT EXISTS "
                                   "(SELECT 1 FROM quarantine q WHERE q.task_id = tasks.id)");
  if (!forget) return Error{forget.error()};
  for (std::int64_t id : tasks) {
    if (auto s = forget->bind(1, id).run(); !s) return Error{s.message()};
  }
  auto files = payloads_.remove_unreferenced(result.payloads);
  if (!files) return Error{files.error()};
  if (auto s = txn->commit(); !s) return Error{s.message()};
  if (files->empty()) return result;
  // Unlinked under the write lock, and only if still unreferenced: another
  // process may have stored the same bytes (same name) since our commit,
  // and writes its file while holding this same lock.
  auto unlink_txn = Transaction::begin(db_->handle());
  if (!unlink_txn) return Error{unlink_txn.error()};
  auto still = Statement::prepare(db_->handle(), "SELECT 1 FROM payloads WHERE sha256 = ?1");
  if (!still) return Error{still.error()};
  for (const auto& f : *files) {
    const std::string sha = f.substr(f.rfind('/') + 1);
    auto row = still->bind(1, std::string_view(sha)).step();
    if (!row) return Error{row.error()};
    still->reset();
    if (!*row) ::unlink(f.c_str());
  }
  if (auto s = unlink_txn->commit(); !s) return Error{s.message()};
  return result;
}

}  // namespace pillbox::store
