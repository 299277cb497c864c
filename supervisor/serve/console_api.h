#pragma once
// The console's JSON API (routes: docs/console.md, The JSON API): the
// objects of the CLI's --json, built by the same library calls, so the two
// cannot drift apart. Errors are {"error": TEXT} with 400 (a bad filter or
// body: the text says what is allowed), 404 (no such record), 409 (being
// replayed) or 500 (the store failed). HTTP itself is console_server.h's;
// it calls these one at a time, under its lock.
#include <cstdint>
#include <map>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>

#include "shared/status.h"
#include "supervisor/ops/patch_record.h"
#include "supervisor/store/database.h"
#include "supervisor/store/quarantine_store.h"
#include "supervisor/store/task_view.h"

namespace pillbox::serve {

// Query parameters, as the HTTP server parsed them (repeats kept).
using Query = std::multimap<std::string, std::string>;

// The store the console shows, opened by the caller, which keeps it open
// for as long as the console runs.
struct ConsoleStore {
  store::Database& db;
  store::QuarantineStore& quarantine;
  std::string dir;
};

struct ApiReply {
  int status = 200;
  nlohmann::json body;
};

// {"error": message} with `status`.
ApiReply error_reply(int status, const std::string& message);
// The reply for a call that failed with `message`: `usage_status` for a
// kUsage error (what the request got wrong), 500 otherwise.
ApiReply failure_reply(const std::string& message, ErrorCode code, int usage_status = 400);

// The most records or tasks one request returns; more are read by paging
// (offset). A listing without a limit returns this many at most.
inline constexpr std::int64_t kMaxPage = 1000;

// status, kind, fingerprint, handler, key, source, raise_site, and with
// `paging` limit and offset. An empty value is the same as none (an HTML
// form's "any"). Unknown names, repeats and bad values are errors (kUsage)
// that list what is allowed.
Expected<store::ListFilter> records_filter(const Query& query, bool paging);
// state, key, handler, limit.
Expected<store::TaskFilter> tasks_filter(const Query& query);
// A record id from a URL: a positive decimal number.
Expected<std::int64_t> record_id(const std::string& text);

ApiReply list_tasks(ConsoleStore& store, const Query& query);
// The `run`s attached to the store now (read_live_runs; not the database).
ApiReply live_runs(ConsoleStore& store);

// A discard's body, {"reason": TEXT}: the reason, or the 400 that says why
// not (read before the record: a bad request changes nothing).
struct DiscardReason {
  std::optional<std::string> reason;
  ApiReply error;
};
DiscardReason discard_reason(const std::string& body);
// A discard's answer, as quarantine discard --json's: {"discarded": [{"id",
// "was"}], "already_discarded": [ID], "changed": N}, for record `id`.
ApiReply discarded_reply(const nlohmann::json& id, bool already, const std::string& was);

// An allow's body, {"note": TEXT, "revoke": BOOL} (both optional, as `quarantine
// allow [--note TEXT] [--revoke]`): the request, or the 400 that says why
// not (read before the record).
struct AllowRequest {
  std::string note;
  store::Review review = store::Review::kAllow;
};
struct AllowBody {
  std::optional<AllowRequest> request;
  ApiReply error;
};
AllowBody allow_body(const std::string& body);
// Its answer, as quarantine allow --json's: {"allowed": [{"id", "was"}],
// "already_allowed": [ID], "changed": N} (revoke: "revoked", "not_allowed").
ApiReply reviewed_reply(store::Review review, const nlohmann::json& id, bool already, const std::string& was);

// The largest new payload a console patch takes (decoded bytes); larger
// ones go through `pillbox quarantine patch --payload-file`. 8 MiB: the
// server holds the base64 body, the decoded bytes and the store's copy at once.
inline constexpr std::size_t kMaxWebPatchPayloadBytes = 8u << 20;
// The largest patch body read: the base64 of kMaxWebPatchPayloadBytes, a
// note (kMaxPatchNoteBytes, up to 6 bytes a byte when JSON-escaped) and room.
inline constexpr std::size_t kMaxPatchBodyBytes = (kMaxWebPatchPayloadBytes / 3 + 1) * 4 + 64 * 1024;
// What a patch that is too large is told (413).
inline constexpr const char* kPatchTooLarge =
    "the patch is too large for the console (a payload of at most 8 MiB); use pillbox quarantine patch ID "
    "--payload-file FILE --note TEXT";

// A patch's body, {"note": TEXT, "payload_b64": BASE64} or {"note": TEXT,
// "set_args": {"K": "V", ...}}: the request (patch_record.h; the record
// aside), or the 400 or 413 (a payload over kMaxWebPatchPayloadBytes) that
// says why not (read before the record: a bad request changes nothing).
struct PatchBody {
  std::optional<PatchRequest> request;
  ApiReply error;
};
PatchBody patch_body(const std::string& body);

// A record's payload preview (ConsoleSource::preview): its first bytes, or
// an error reply.
struct PayloadReply {
  ApiReply error;  // status 200: no error
  std::string bytes;
};

}  // namespace pillbox::serve
