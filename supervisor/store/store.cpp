#include "supervisor/store/store.h"

#include "supervisor/store/schema.h"
#include "supervisor/store/store_dir.h"

namespace pillbox::store {

Expected<Store> Store::open(const std::string& dir) {
  if (auto s = prepare_store_dir(dir); !s) return Error{s.message()};
  auto db = Database::open(dir + "/pillbox.db");
  if (!db) return Error{db.error()};
  if (auto s = migrate(*db); !s) return Error{s.message()};
  return Store(dir, std::move(*db));
}

}  // namespace pillbox::store
