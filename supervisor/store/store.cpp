#include "supervisor/store/store.h"

#include <sys/stat.h>

#include <cerrno>
#include <cstring>

#include "supervisor/io/kept_out_of_inputs.h"
#include "supervisor/store/schema.h"
#include "supervisor/store/store_dir.h"

namespace pillbox::store {

void keep_store_out_of_inputs(const std::string& dir) {
  keep_out_of_inputs(dir, {"pillbox.db", "pillbox.db-wal", "pillbox.db-shm"}, "the pillbox store " + dir);
}

Expected<Store> Store::open(const std::string& dir) {
  if (auto s = prepare_store_dir(dir); !s) return Error{s.message()};
  keep_store_out_of_inputs(dir);
  auto db = Database::open(dir + "/pillbox.db");
  if (!db) return Error{db.error()};
  if (auto s = migrate(*db); !s) return Error{s.message()};
  return Store(dir, std::move(*db));
}

Expected<Store> Store::open_existing(const std::string& dir) {
  struct stat st {};
  const std::string db = dir + "/pillbox.db";
  if (::stat(dir.c_str(), &st) != 0 && errno == ENOENT) {
    return Error{"no pillbox store at " + dir + " (`pillbox run --store " + dir +
                 "` creates one; is --store or PILLBOX_STORE right?)"};
  }
  if (::stat(db.c_str(), &st) != 0) {
    if (errno == ENOENT) return Error{"no pillbox store at " + dir + ": it has no pillbox.db"};
    return Error{"store database " + db + ": " + std::strerror(errno)};
  }
  return open(dir);
}

}  // namespace pillbox::store
