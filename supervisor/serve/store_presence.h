#pragma once
// Whether the store `pillbox serve` opened is still the one at its path.
// SQLite keeps reading a database file that was removed or replaced while
// it is open, so without this check a console would go on showing a store
// that was deleted, moved away or restored from a backup. While
// STORE/pillbox.db is not the file opened, requests answer 503
// (console_server.cpp); once the same file is back, they serve again. A
// file put in its place is another store: serve must restart to show it.
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
