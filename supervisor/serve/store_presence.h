#pragma once
// Whether the store `pillbox serve` opened is still the one at its path.
// SQLite keeps reading a database file that was removed or replaced while
// it is open (the connection holds the old file), so without this check a
// console whose store was deleted, moved away or restored from a backup
// would go on showing what is no longer there, as if nothing happened. Each
// request that reads the store asks first (console_server.cpp): while the
// file at STORE/pillbox.db is not the one opened, pages and the API answer
// 503 saying what happened and what to do, and /metrics says
// pillbox_store_up 0; once the same file is back (moved back), they serve
// again. A file put there in its place is another store: serve restarts
// to show it.
#include <sys/types.h>

#include <optional>
#include <string>

namespace pillbox::serve {

class StorePresence {
 public:
  // Notes the file at STORE/pillbox.db now (its device and inode): call it
  // once the store is open.
  explicit StorePresence(const std::string& store_dir);

  // Why the store cannot be served now, in words for the operator, or
  // nothing when the file opened is still there and readable.
  std::optional<std::string> problem() const;

 private:
  std::string path_;
  dev_t dev_ = 0;
  ino_t ino_ = 0;
  bool known_ = false;
};

}  // namespace pillbox::serve
