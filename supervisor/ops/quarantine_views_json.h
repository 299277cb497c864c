#pragma once
// The JSON of `quarantine show --json` and `stats --json`, shared by the CLI
// (supervisor/cli/quarantine_print.cpp) and the console's API
// (supervisor/serve/console_api.cpp). Ids are JSON: the store's number or the
// fleet's entry id (a string).
#include <cstdint>
#include <nlohmann/json.hpp>
#include <string>
#include <string_view>
#include <vector>

#include "shared/status.h"
#include "supervisor/ops/quarantine_source.h"
#include "supervisor/store/quarantine_store.h"
#include "supervisor/store/revision_store.h"

namespace pillbox {

// The first bytes of a payload that show --json carries ("payload_head_b64").
inline constexpr std::size_t kPayloadHeadBytes = 512;

// The list's object for a record (quarantine_record_json) with `id` in place
// of the store's own.
nlohmann::json record_list_json(const nlohmann::json& id, const store::QuarantineRecord& record,
                                const std::string& where);

// The console's listing's object of a record of either quarantine:
// record_list_json, with "signature" where records are signed and
// "state_error" when what operators did with it cannot be read (list --json
// leaves that note to show).
nlohmann::json sourced_list_json(const SourcedRecord& record, const std::string& where);

// One element of "attempt_history". `run` is the store's run number or the
// worker's name; `started_at`/`ended_at` 0 print as null (not known), and an
// attempt that never ended is "unfinished".
nlohmann::json attempt_json(std::int64_t n, const nlohmann::json& run, std::int64_t started_at, std::int64_t ended_at,
                            const std::string& kind, const std::string& fingerprint, const std::string& message,
                            bool charged, bool solo, std::string_view stderr_tail = {});

// The record with its attempts and audit trail, as one JSON object (show
// --json, export --bundle's record.json): the list's object with "policy",
// "stderr_tail", "attempt_history" and "audit".
nlohmann::json full_record_json(const nlohmann::json& id, const store::QuarantineRecord& record,
                                const std::string& where, nlohmann::json attempt_history,
                                const std::vector<store::AuditEntry>& audit);

// One element of "revisions" (show --json, patch --json): an operator's
// patch of the record (supervisor/store/revision_store.h): {"n", "at",
// "actor", "note", "summary", "payload_sha256", "payload_size",
// "handler_args" (an object)}.
nlohmann::json revision_json(const store::Revision& revision);
// patch --json's object, also the console's answer to a patch
// (POST /api/records/ID/patch): revision_json with "record_id".
nlohmann::json patched_record_json(const store::Revision& revision, const nlohmann::json& record_id);

// full_record_json of a record of the store, its attempts read from the
// ledger, its audit trail from the quarantine, and "revisions", its
// operators' patches oldest first (the original's fields are unchanged by
// them). An error when they cannot be read.
Expected<nlohmann::json> stored_record_json(store::QuarantineStore& quarantine, const store::QuarantineRecord& record,
                                            const std::string& store_dir);

// show --json's object: `full` with "payload_head_b64", the first
// kPayloadHeadBytes of `payload` exact in base64 (a payload need not be UTF-8).
nlohmann::json shown_record_json(nlohmann::json full, const std::string& payload);

// The lines of stats --json, one per fingerprint group, with its example
// record's id (example_ids[i]); with its series (a store's groups),
// "by_day": [{"day": "YYYY-MM-DD", "records": N}, ...], kStatsDays of them,
// oldest first, today (UTC) last; its "raise_site" and "raise_site_id"
// (null when it has none) and "raise_site_groups", how many of `groups`
// share it (ops/raise_site_rollup.h).
std::vector<nlohmann::json> fingerprint_stats_json(const std::vector<store::FingerprintStats>& groups,
                                                   const std::vector<nlohmann::json>& example_ids);

}  // namespace pillbox
