#include "supervisor/store/statement.h"

#include <utility>

namespace pillbox::store {

Expected<Statement> Statement::prepare(sqlite3* db, const std::string& sql) {
  sqlite3_stmt* stmt = nullptr;
  if (::sqlite3_prepare_v3(db, sql.c_str(), -1, SQLITE_PREPARE_PERSISTENT, &stmt, nullptr) != SQLITE_OK) {
    return Error{std::string("store: cannot prepare statement: ") + ::sqlite3_errmsg(db)};
  }
  return Statement(db, stmt);
}

Statement::Statement(Statement&& other) noexcept
    : db_(other.db_), stmt_(std::exchange(other.stmt_, nullptr)), stepped_(other.stepped_) {}

Statement& Statement::operator=(Statement&& other) noexcept {
  if (this != &other) {
    if (stmt_ != nullptr) ::sqlite3_finalize(stmt_);
    db_ = other.db_;
    stmt_ = std::exchange(other.stmt_, nullptr);
    stepped_ = other.stepped_;
  }
  return *this;
}

Statement::~Statement() {
  if (stmt_ != nullptr) ::sqlite3_finalize(stmt_);
}

void Statement::ensure_fresh() {
  if (stepped_) reset();
}

void Statement::reset() {
  ::sqlite3_reset(stmt_);
  ::sqlite3_clear_bindings(stmt_);
  stepped_ = false;
}

Statement& Statement::bind(int index, std::int64_t value) {
  ensure_fresh();
  ::sqlite3_bind_int64(stmt_, index, value);
  return *this;
}

Statement& Statement::bind(int index, std::string_view text) {
  ensure_fresh();
  ::sqlite3_bind_text64(stmt_, index, text.data(), text.size(), SQLITE_TRANSIENT, SQLITE_UTF8);
  return *this;
}

Statement& Statement::bind_blob(int index, std::string_view bytes) {
  ensure_fresh();
  // A zero-length blob is still a blob, not NULL.
  ::sqlite3_bind_blob64(stmt_, index, bytes.empty() ? "" : bytes.data(), bytes.size(), SQLITE_TRANSIENT);
  return *this;
}

Statement& Statement::bind_null(int index) {
  ensure_fresh();
  ::sqlite3_bind_null(stmt_, index);
  return *this;
}

Statement& Statement::bind(int index, const std::optional<std::string>& text) {
  return text ? bind(index, std::string_view(*text)) : bind_null(index);
}

Expected<bool> Statement::step() {
  stepped_ = true;
  const int rc = ::sqlite3_step(stmt_);
  if (rc == SQLITE_ROW) return true;
  if (rc == SQLITE_DONE) return false;
  std::string message = std::string("store: ") + ::sqlite3_errmsg(db_);
  ::sqlite3_reset(stmt_);
  return Error{message};
}

Status Statement::run() {
  if (auto s = each_row([] {}); !s) return s;
  ::sqlite3_reset(stmt_);
  return Status::ok();
}

Status prepare_all(sqlite3* db, std::initializer_list<StatementSql> statements) {
  for (const auto& [target, sql] : statements) {
    auto stmt = Statement::prepare(db, sql);
    if (!stmt) return Status::error(stmt.error());
    *target = std::move(*stmt);
  }
  return Status::ok();
}

std::int64_t Statement::column_int(int index) const { return ::sqlite3_column_int64(stmt_, index); }

std::string Statement::column_text(int index) const {
  const void* data = ::sqlite3_column_blob(stmt_, index);
  const int size = ::sqlite3_column_bytes(stmt_, index);
  return data != nullptr ? std::string(static_cast<const char*>(data), static_cast<std::size_t>(size)) : std::string();
}

bool Statement::column_is_null(int index) const { return ::sqlite3_column_type(stmt_, index) == SQLITE_NULL; }

Expected<Transaction> Transaction::begin(sqlite3* db) {
  if (::sqlite3_exec(db, "BEGIN IMMEDIATE", nullptr, nullptr, nullptr) != SQLITE_OK) {
    return Error{std::string("store: cannot start a transaction: ") + ::sqlite3_errmsg(db)};
  }
  return Transaction(db);
}

Transaction::Transaction(Transaction&& other) noexcept : db_(std::exchange(other.db_, nullptr)) {}

Transaction::~Transaction() {
  if (db_ != nullptr) ::sqlite3_exec(db_, "ROLLBACK", nullptr, nullptr, nullptr);
}

Status Transaction::commit() {
  if (::sqlite3_exec(db_, "COMMIT", nullptr, nullptr, nullptr) != SQLITE_OK) {
    return Status::error(std::string("store: commit failed: ") + ::sqlite3_errmsg(db_));
  }
  db_ = nullptr;
  return Status::ok();
}

}  // namespace pillbox::store
