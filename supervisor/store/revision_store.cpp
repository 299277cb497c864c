#include "supervisor/store/revision_store.h"

#include "supervisor/store/statement.h"

namespace pillbox::store {
namespace {

constexpr const char* kColumns =
    "record_id, n, payload_sha256, payload_size, handler_args, created_at, actor, note, summary";

Revision read_revision(const Statement& s) {
  Revision r;
  r.record_id = s.column_int(0);
  r.n = s.column_int(1);
  r.payload_sha256 = s.column_text(2);
  r.payload_size = s.column_int(3);
  r.handler_args = s.column_text(4);
  r.created_at = s.column_int(5);
  r.actor = s.column_text(6);
  r.note = s.column_text(7);
  r.summary = s.column_text(8);
  return r;
}

}  // namespace

Expected<std::vector<Revision>> RevisionStore::list(std::int64_t record_id) {
  auto stmt = Statement::prepare(db_->handle(),
                                 std::string("SELECT ") + kColumns + " FROM revisions WHERE record_id = ?1 ORDER BY n");
  if (!stmt) return Error{stmt.error()};
  stmt->bind(1, record_id);
  return stmt->rows([&] { return read_revision(*stmt); });
}

Expected<std::optional<Revision>> RevisionStore::latest(std::int64_t record_id) {
  auto stmt = Statement::prepare(
      db_->handle(), std::string("SELECT ") + kColumns + " FROM revisions WHERE record_id = ?1 ORDER BY n DESC LIMIT 1");
  if (!stmt) return Error{stmt.error()};
  auto row = stmt->bind(1, record_id).step();
  if (!row) return Error{row.error()};
  if (!*row) return std::optional<Revision>();
  return std::optional<Revision>(read_revision(*stmt));
}

Expected<std::int64_t> RevisionStore::append(const Revision& r) {
  auto stmt = Statement::prepare(
      db_->handle(),
      "INSERT INTO revisions (record_id, n, payload_sha256, payload_size, handler_args, created_at, actor, note, summary) "
      "VALUES (?1, (SELECT coalesce(max(n), 0) + 1 FROM revisions WHERE record_id = ?1), ?2, ?3, ?4, ?5, ?6, ?7, ?8) "
      "RETURNING n");
  if (!stmt) return Error{stmt.error()};
  auto row = stmt->bind(1, r.record_id)
                 .bind(2, std::string_view(r.payload_sha256))
                 .bind(3, r.payload_size)
                 .bind(4, std::string_view(r.handler_args))
                 .bind(5, r.created_at)
                 .bind(6, std::string_view(r.actor))
                 .bind(7, std::string_view(r.note))
                 .bind(8, std::string_view(r.summary))
                 .step();
  if (!row) return Error{row.error()};
  if (!*row) return Error{"store: the revision of record " + std::to_string(r.record_id) + " was not added"};
  const std::int64_t n = stmt->column_int(0);
  stmt->reset();
  return n;
}

}  // namespace pillbox::store
