#pragma once
// What the quarantine verbs print, for records of either quarantine: the
// store's (supervisor/store/quarantine_store.h) and the fleet's on Redis
// (supervisor/broker/fleet_quarantine.h). One writer for both, so that their
// text and JSON cannot drift apart. A record's id is the store's number or
// the fleet's entry id (a string); printers take it as JSON, which keeps
// each kind as it is in --json, and show it as text in tables.
#include <cstdint>
#include <functional>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "shared/status.h"
#include "supervisor/cli/args.h"
#include "supervisor/classify/outcome.h"
#include "supervisor/ops/quarantine_source.h"
#include "supervisor/ops/quarantine_views_json.h"
#include "supervisor/store/quarantine_store.h"
#include "supervisor/store/replay_verdict.h"

namespace pillbox::cli {

// "42", "1712345678901-0".
std::string id_text(const nlohmann::json& id);

// ---- list ---------------------------------------------------------------------

// The list verb: --limit/--offset/--json read, records printed as a table
// (a SIGNATURE column where records are signed) or one JSON object per line
// (record_list_json, with "signature" where records are signed),
// the page's place on stderr. The exit code.
int list_records(const Args& args, store::ListFilter filter, QuarantineSource& source);

// ---- stats --------------------------------------------------------------------

// `example_ids[i]` is groups[i]'s example record. The exit code.
int print_stats(const std::vector<store::FingerprintStats>& groups, const std::vector<nlohmann::json>& example_ids,
                bool json);

// ---- show and export -----------------------------------------------------------

// full_record_json, attempt_json and revision_json, the objects of show --json: supervisor/ops/quarantine_views_json.h.

struct ShownRecord {
  nlohmann::json id;
  const store::QuarantineRecord& record;
  nlohmann::json full;                       // full_record_json
  Expected<std::string> payload;             // its bytes, or why they cannot be read
  std::optional<std::size_t> minimized_size; // with record.minimized_sha256, when readable
  std::string reproduce_hint;                // the command that checks it ("" when none)
};
// show ID [--json]. The exit code (3 when the payload cannot be read).
int print_record(const ShownRecord& shown, bool json);

// -o given, and not "-" with --bundle or --json: checked before any record is read.
Status check_export_options(const Args& args);
// export ID -o FILE [--bundle] [--force]: `payload` (the bytes asked for,
// `sha256` theirs) to a file or stdout, or a bundle directory with the
// policy, record.json (`full`) and reproduce.sh. With --json, what was
// written as one object on stdout: {"id", "output", "bundle", "minimized",
// "bytes", "sha256"}. The exit code.
int export_record(const Args& args, const nlohmann::json& id, const store::QuarantineRecord& record,
                  const nlohmann::json& full, const std::string& payload, const std::string& sha256);

// ---- discard, allow ----------------------------------------------------------------

// The words of one change of status an operator makes.
struct StatusChangeWords {
  const char* key;           // the JSON key of the records changed: "discarded"
  const char* already_key;   // ... of those left as they were: "already_discarded"
  const char* done;          // "record 12 " + done + " (was quarantined)"
  const char* already;       // "record 12 " + already
};
inline constexpr StatusChangeWords kDiscardWords{"discarded", "already_discarded", "discarded", "was already discarded"};
inline constexpr StatusChangeWords kAllowWords{"allowed", "already_allowed", "allowed to replay", "was already allowed"};
inline constexpr StatusChangeWords kRevokeWords{"revoked", "not_allowed", "back to quarantined, its allowance revoked",
                                                "was not allowed: left as it is"};

// What discard (or allow, allow --revoke) did: a line per record on stdout
// ("record 12 discarded (was quarantined)") and the count on stderr; with
// --json, one object on stdout at the end: {"discarded": [{"id", "was"}...],
// "already_discarded": [ID...], "changed": N} (allow: "allowed",
// "already_allowed"; --revoke: "revoked", "not_allowed").
class StatusChangeReport {
 public:
  StatusChangeReport(bool json, const StatusChangeWords& words) : json_(json), words_(words) {}
  void changed(const nlohmann::json& id, const std::string& was);
  void already(const nlohmann::json& id);
  void finish() const;

 private:
  bool json_;
  StatusChangeWords words_;
  nlohmann::json changed_ids_ = nlohmann::json::array();
  nlohmann::json already_ = nlohmann::json::array();
  int changed_ = 0;
};

// ---- replay ---------------------------------------------------------------------

// --dry-run's plan: one row per record it would replay, then what it skips;
// with --json one object: {"dry_run": true, "batch": N, "count": N,
// "records": [{"id", "status", "kind", "fingerprint", "key"}...], "skipped": [TEXT...]}.
// `revisions[i]` > 0: plan[i] would run that revision, a patch (JSON
// "revision": N); empty or 0: the original.
void print_replay_plan(const std::vector<std::pair<nlohmann::json, const store::QuarantineRecord*>>& plan,
                       std::size_t batch, const std::vector<std::string>& skipped, bool json,
                       const std::vector<std::int64_t>& revisions = {});
// One replayed record's line (or JSON object with --json): its outcome and
// verdict. `output_file`: where its output went ("" for none). `revision` >
// 0: what ran was that revision of the record, a patch (JSON "revision": N).
// `output_omitted`: why its output is not at hand (JSON "output_omitted"
// instead of an "output" that would read as empty).
void print_replay_result(const nlohmann::json& id, const store::QuarantineRecord& record, const Outcome& outcome,
                         store::ReplayVerdict verdict, bool json, const std::string& output_file,
                         std::int64_t revision = 0, const std::string& output_omitted = "");

}  // namespace pillbox::cli
