#pragma once
// pillbox quarantine patch (docs/operator.md, 'pillbox quarantine patch'):
// an operator's new payload or handler arguments, stored as the record's
// next revision (supervisor/store/revision_store.h) beside the unchanged
// original. Called by the CLI verb and the web console with their own actor.
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "shared/status.h"
#include "supervisor/store/database.h"
#include "supervisor/store/quarantine_store.h"
#include "supervisor/store/revision_store.h"

namespace pillbox {

inline constexpr std::size_t kMaxPatchNoteBytes = 4096;
inline constexpr std::size_t kMaxPatchArgKeyBytes = 128;
inline constexpr std::size_t kMaxPatchArgValueBytes = 64 * 1024;

struct PatchRequest {
  std::int64_t record_id = 0;
  std::optional<std::string> payload;                          // the new payload's exact bytes, or
  std::vector<std::pair<std::string, std::string>> set_args;   // handler arguments to set (later wins)
  std::string note;                                            // why; required
  std::string actor;                                           // actor_name("quarantine patch"), "web: <address>"
};

// The request's own mistakes (kUsage), found before any record is read:
// both or neither of a payload and arguments, no note or one over
// kMaxPatchNoteBytes, a payload over kMaxPayloadBytes, an argument's name
// or value out of bounds. patch_record checks them first too.
Status check_patch_request(const PatchRequest& request);

// Why record `id` cannot be patched now, or "" when it can: a replay holds
// it (its status, or `claim`: who holds it, "" when nobody), or it is not
// open (resolved, discarded). The refusals of every quarantine's patch.
std::string patch_refusal(const std::string& id, store::RecordStatus status, const std::string& claim);

// Stores the patch as the record's next revision, in one transaction with
// its audit entry ("patched"). The record must be open and not in a replay:
// status quarantined, allowed or failed-again, no replay claim; this is
// checked under the store's write lock, so a replay that claims the record
// first wins. An allowed record goes back to quarantined (its allowance
// revoked, audited): what a replay would run now nobody has reviewed.
// Errors with ErrorCode::kUsage change nothing and say what to do: no such
// record, a record resolved, discarded or being replayed, no note, both or
// neither of a payload and arguments, arguments for an exec record (it has a
// command line, not handler arguments), a payload over kMaxPayloadBytes, a
// patch identical to the newest revision. Other errors are the store's.
Expected<store::Revision> patch_record(store::Database& db, store::QuarantineStore& quarantine,
                                       const PatchRequest& request, std::int64_t now_ms);

// What a payload patch changed, for the audit trail and `show`, e.g.
// "payload 1234 -> 1234 bytes, 3 byte ranges changed (offsets 10-310)" or
// "payload 1234 -> 1180 bytes, bytes 10-64 replaced by 0 bytes".
std::string payload_change_summary(std::string_view before, std::string_view after);
// "arg mode: strict -> lenient; arg depth: (unset) -> 3". `before` and
// `after` are handler argument objects (JSON text); values are cut to 60 bytes.
std::string args_change_summary(const std::string& before, const std::string& after);

}  // namespace pillbox
