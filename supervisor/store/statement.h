#pragma once
// A prepared SQLite statement: bind by position (1-based), step, read
// columns; reset() readies it for reuse.
#include <sqlite3.h>

#include <cstdint>
#include <initializer_list>
#include <optional>
#include <string>
#include <string_view>
#include <type_traits>
#include <vector>

#include "shared/status.h"

namespace pillbox::store {

class Statement {
 public:
  Statement() = default;
  static Expected<Statement> prepare(sqlite3* db, const std::string& sql);

  Statement(Statement&& other) noexcept;
  Statement& operator=(Statement&& other) noexcept;
  Statement(const Statement&) = delete;
  Statement& operator=(const Statement&) = delete;
  ~Statement();

  // Binding resets a statement that has been stepped, so a reused statement
  // needs no explicit reset() before its next bind.
  Statement& bind(int index, std::int64_t value);
  Statement& bind(int index, std::string_view text);
  Statement& bind_blob(int index, std::string_view bytes);
  Statement& bind_null(int index);
  Statement& bind(int index, const std::optional<std::string>& text);

  // True when a row is ready, false when done; an error otherwise.
  Expected<bool> step();
  // Steps to completion, for statements that return no rows (or whose rows
  // are not needed).
  Status run();
  // Steps through the rows, calling `row()` at each. `row` returns void, false
  // to stop early, or a Status or Expected<bool> whose error stops the walk
  // and is returned. Like step(), leaves the statement un-reset: the caller
  // resets where a read lock must not outlive the walk.
  template <class Row>
  Status each_row(Row&& row);
  // Steps through the rows, collecting what `row()` makes of each.
  template <class Row>
  Expected<std::vector<std::invoke_result_t<Row&>>> rows(Row&& row) {
    std::vector<std::invoke_result_t<Row&>> out;
    if (const Status read = each_row([&] { out.push_back(row()); }); !read) return Error{read.message()};
    return out;
  }

  std::int64_t column_int(int index) const;
  std::string column_text(int index) const;
  bool column_is_null(int index) const;

  void reset();

 private:
  Statement(sqlite3* db, sqlite3_stmt* stmt) : db_(db), stmt_(stmt) {}
  void ensure_fresh();

  sqlite3* db_ = nullptr;
  sqlite3_stmt* stmt_ = nullptr;
  bool stepped_ = false;
};

template <class Row>
Status Statement::each_row(Row&& row) {
  using Result = decltype(row());
  while (true) {
    auto more = step();
    if (!more) return Status::error(more.error());
    if (!*more) return Status::ok();
    if constexpr (std::is_void_v<Result>) {
      row();
    } else if constexpr (std::is_same_v<Result, Status>) {
      if (Status s = row(); !s) return s;
    } else {
      Expected<bool> go = row();
      if (!go) return go.status();
      if (!*go) return Status::ok();
    }
  }
}

// A statement to prepare, and where to keep it.
struct StatementSql {
  Statement* target;
  std::string sql;
};
// Prepares each statement into its target, in order; the first failure is
// the error.
Status prepare_all(sqlite3* db, std::initializer_list<StatementSql> statements);

// Commits on commit(), rolls back otherwise: no path leaves a transaction
// open. BEGIN IMMEDIATE takes the write lock at once, so a concurrent writer
// waits in the busy handler instead of failing half-way through.
class Transaction {
 public:
  static Expected<Transaction> begin(sqlite3* db);
  Transaction(Transaction&& other) noexcept;
  Transaction& operator=(Transaction&&) = delete;
  Transaction(const Transaction&) = delete;
  ~Transaction();
  Status commit();

 private:
  explicit Transaction(sqlite3* db) : db_(db) {}
  sqlite3* db_ = nullptr;
};

}  // namespace pillbox::store
