#pragma once
// A connection to the store's SQLite database: WAL journal, foreign keys on,
// a busy timeout so that two pillbox processes sharing a store wait for each
// other instead of failing, and files created 0600.
#include <sqlite3.h>

#include <cstdint>
#include <string>

#include "shared/status.h"

namespace pillbox::store {

class Database {
 public:
  // Opens (creating it 0600 if missing) the database file at `path`.
  static Expected<Database> open(const std::string& path);

  Database(Database&& other) noexcept;
  Database& operator=(Database&& other) noexcept;
  Database(const Database&) = delete;
  Database& operator=(const Database&) = delete;
  ~Database();

  // Runs one or more statements that return no rows.
  Status exec(const std::string& sql);
  // The first column of the first row of `sql`, as an integer.
  Expected<std::int64_t> query_int(const std::string& sql);
  // The first column of the first row of `sql`, as text.
  Expected<std::string> query_text(const std::string& sql);

  sqlite3* handle() const { return db_; }
  const std::string& path() const { return path_; }

 private:
  Database(sqlite3* db, std::string path) : db_(db), path_(std::move(path)) {}
  std::string error(const std::string& what) const;

  sqlite3* db_ = nullptr;
  std::string path_;
};

}  // namespace pillbox::store
