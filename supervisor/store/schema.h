#pragma once
// The store's schema and its migrations. The version is SQLite's
// `PRAGMA user_version`; each migration moves it up by one, inside the same
// transaction, so a store is always at exactly one version.
#include "shared/status.h"
#include "supervisor/store/database.h"

namespace pillbox::store {

// The version this build writes. A store at a higher version was written by
// a newer pillbox and is refused, never modified.
int schema_version();

// Brings the database up to `target` (tests make older stores with a lower
// one). Concurrent processes serialize on the write lock.
Status migrate(Database& db, int target);
inline Status migrate(Database& db) { return migrate(db, schema_version()); }

}  // namespace pillbox::store
