#include "supervisor/store/schema.h"

#include <string>
#include <vector>

namespace pillbox::store {
namespace {

// Migration N (1-based) takes a store from version N-1 to N. Append only:
// never edit one that has shipped.
const std::vector<std::string>& migrations() {
  static const std::vector<std::string> all = {
      // 1: what wrote the store and when; later migrations add the ledger and
      // the quarantine (issue 3).
      R"sql(
        CREATE TABLE store_info (
          key   TEXT PRIMARY KEY,
          value TEXT NOT NULL
        );
        INSERT INTO store_info (key, value) VALUES
          ('created_at', strftime('%Y-%m-%dT%H:%M:%fZ', 'now')),
          ('created_by', 'pillbox )sql" PILLBOX_VERSION R"sql(');
      )sql",
  };
  return all;
}

}  // namespace

int schema_version() { return static_cast<int>(migrations().size()); }

Status migrate(Database& db) {
  // IMMEDIATE: take the write lock before reading the version, so two
  // processes cannot both decide to apply the same migration.
  if (auto s = db.exec("BEGIN IMMEDIATE"); !s) return s;
  auto rollback = [&](Status s) {
    (void)db.exec("ROLLBACK");
    return s;
  };
  auto current = db.query_int("PRAGMA user_version");
  if (!current) return rollback(Status::error(current.error()));
  const int target = schema_version();
  if (*current > target) {
    return rollback(Status::error("store " + db.path() + " has schema version " + std::to_string(*current) +
                                  ", newer than this pillbox understands (" + std::to_string(target) +
                                  "); use a newer pillbox, or another --store"));
  }
  for (int version = static_cast<int>(*current) + 1; version <= target; ++version) {
    if (auto s = db.exec(migrations()[static_cast<std::size_t>(version - 1)]); !s) {
      return rollback(Status::error("store migration to version " + std::to_string(version) + " failed: " + s.message()));
    }
    if (auto s = db.exec("PRAGMA user_version = " + std::to_string(version)); !s) return rollback(s);
  }
  return db.exec("COMMIT");
}

}  // namespace pillbox::store
