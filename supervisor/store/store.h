#pragma once
// The durable store: a 0700 directory holding pillbox.db (SQLite, WAL, 0600),
// at the current schema version: the task ledger and the quarantine.
#include <string>

#include "shared/status.h"
#include "supervisor/store/database.h"

namespace pillbox::store {

// Keeps the store at `dir` out of this process's inputs
// (kept_out_of_inputs.h), for a command that lists inputs before it opens
// the store; Store::open does it too.
void keep_store_out_of_inputs(const std::string& dir);

class Store {
 public:
  // Prepares the directory (see store_dir.h), opens the database and
  // migrates it. `dir` is the resolved directory (resolve_store_dir).
  static Expected<Store> open(const std::string& dir);
  // For commands that act on what a store holds: a missing store is an
  // error, not created empty.
  static Expected<Store> open_existing(const std::string& dir);

  Database& db() { return db_; }
  const std::string& dir() const { return dir_; }

 private:
  Store(std::string dir, Database db) : dir_(std::move(dir)), db_(std::move(db)) {}
  std::string dir_;
  Database db_;
};

}  // namespace pillbox::store
