#pragma once
// Revisions of a quarantine record (`quarantine patch`): whole payload and
// arguments, numbered 1, 2, ... per record; the original stays in the
// quarantine row. Replay runs the newest. Deleted with their record.
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "shared/status.h"
#include "supervisor/store/database.h"

namespace pillbox::store {

struct Revision {
  std::int64_t record_id = 0;
  std::int64_t n = 0;                 // 1 for the first patch; the original is revision 0 (never stored here)
  std::string payload_sha256;         // in the payloads table
  std::int64_t payload_size = 0;
  std::string handler_args;           // JSON object, as QuarantineEntry::handler_args
  std::int64_t created_at = 0;
  std::string actor;                  // actor_name(...) or "web: <address>"
  std::string note;                   // why, in the operator's words
  std::string summary;                // what changed from the revision before
};

class RevisionStore {
 public:
  // The database outlives the store.
  explicit RevisionStore(Database& db) : db_(&db) {}

  // Oldest first; empty when the record was never patched.
  Expected<std::vector<Revision>> list(std::int64_t record_id);
  // The newest revision, or none.
  Expected<std::optional<Revision>> latest(std::int64_t record_id);
  // REQUIRES: inside the caller's transaction, the payload already stored.
  // Appends `revision` as the record's next one (its `n` is ignored) and
  // returns the number it got.
  Expected<std::int64_t> append(const Revision& revision);

 private:
  Database* db_;
};

}  // namespace pillbox::store
