#include "supervisor/broker/fleet_state.h"

#include <nlohmann/json.hpp>

#include "supervisor/io/untrusted_json.h"

namespace pillbox::broker {
namespace {

using nlohmann::json;

// An audit trail of thousands of actions fits; a longer value was not
// written by pillbox (anyone who can write to Redis can write this hash).
constexpr std::size_t kMaxStateBytes = 4 << 20;

json attempt_to_json(const FleetAttempt& a) {
  json j = {{"worker", a.worker},   {"ended_at", a.ended_at}, {"kind", a.kind},
            {"fingerprint", a.fingerprint}, {"message", a.message}, {"charged", a.charged},
            {"entry", a.entry},     {"outcome_entry", a.outcome_entry}};
  if (a.revision > 0) j["revision"] = a.revision;
  return j;
}

json revision_to_json(const FleetRevision& v) {
  json j = {{"n", v.n},           {"payload_sha256", v.payload_sha256}, {"payload_size", v.payload_size},
            {"created_at", v.created_at}, {"actor", v.actor}, {"note", v.note},
            {"summary", v.summary}, {"sig", v.sig}};
  if (v.at >= 0) j["at"] = v.at;
  return j;
}

// j[key] as an int64: 0 when it is missing or a number that is no whole
// int64 (1e300: nlohmann's value<int64_t>() converts a float unchecked,
// which is undefined behaviour); another type throws json::type_error.
std::int64_t whole(const json& j, const char* key) {
  const auto it = j.find(key);
  if (it == j.end()) return 0;
  if (it->is_number()) return json_whole_number(*it).value_or(0);
  return it->get<std::int64_t>();
}

FleetAttempt attempt_from_json(const json& j) {
  return {.worker = j.value("worker", ""), .ended_at = whole(j, "ended_at"),
          .kind = j.value("kind", ""), .fingerprint = j.value("fingerprint", ""), .message = j.value("message", ""),
          .charged = j.value("charged", true), .entry = j.value("entry", ""),
          .outcome_entry = j.value("outcome_entry", ""), .revision = whole(j, "revision")};
}

// j[key] as an offset: -1 when it is missing or no whole number >= 0.
std::int64_t offset_at(const json& j, const char* key) {
  const auto it = j.find(key);
  if (it == j.end() || !it->is_number()) return -1;
  const auto n = json_whole_number(*it);
  return n && *n >= 0 ? *n : -1;
}

FleetRevision revision_from_json(const json& j) {
  return {.n = whole(j, "n"), .payload_sha256 = j.value("payload_sha256", ""),
          .payload_size = whole(j, "payload_size"), .at = offset_at(j, "at"), .created_at = whole(j, "created_at"),
          .actor = j.value("actor", ""), .note = j.value("note", ""), .summary = j.value("summary", ""),
          .sig = j.value("sig", "")};
}

}  // namespace

std::string state_json(const FleetState& s) {
  json audit = json::array();
  for (const auto& e : s.audit) audit.push_back({{"at", e.at}, {"actor", e.actor}, {"action", e.action}, {"detail", e.detail}});
  json redrives = json::array();
  for (const auto& a : s.redrives) redrives.push_back(attempt_to_json(a));
  json j = {{"status", std::string(store::to_string(s.status))},
            {"updated_at", s.updated_at},
            {"audit", audit},
            {"redrives", redrives}};
  if (s.status == store::RecordStatus::kAllowed) {
    j["allowance"] = {{"at", s.allowance.at}, {"actor", s.allowance.actor}, {"sig", s.allowance.sig}};
  }
  if (!s.waiting_entry.empty()) j["waiting_entry"] = s.waiting_entry;
  if (s.waiting_revision > 0) j["waiting_revision"] = s.waiting_revision;
  if (!s.revisions.empty()) {
    json revisions = json::array();
    for (const auto& v : s.revisions) revisions.push_back(revision_to_json(v));
    j["revisions"] = std::move(revisions);
  }
  if (!s.reproduce_verdict.empty()) {
    j["reproduce"] = {{"verdict", s.reproduce_verdict}, {"runs", s.reproduce_runs}, {"matches", s.reproduce_matches}};
  }
  if (s.minimize) {
    j["minimize"] = {{"best_sha256", s.minimize->best_sha256}, {"runs", s.minimize->runs},
                     {"elapsed_ms", s.minimize->elapsed_ms}, {"finished", s.minimize->finished}};
    if (s.minimize_best_at >= 0) j["minimize"]["best_at"] = s.minimize_best_at;
  }
  if (!s.minimized_sha256.empty()) j["minimized_sha256"] = s.minimized_sha256;
  if (s.minimized_at >= 0) j["minimized_at"] = s.minimized_at;
  if (!s.lease_by.empty()) j["lease"] = {{"by", s.lease_by}, {"until", s.lease_until}};
  return j.dump(-1, ' ', false, json::error_handler_t::replace);
}

Expected<FleetState> parse_state(std::string_view text) {
  FleetState s;
  if (text.empty()) return s;
  UntrustedJson parsed = parse_untrusted_json(text, kMaxStateBytes);
  if (!parsed.why_not.empty()) return Error{"not a record state written by pillbox (" + parsed.why_not + ")"};
  const json& j = parsed.value;
  if ( !j.is_object() || !j.contains("status") || !j["status"].is_string()) {
    return Error{"not a record state written by pillbox"};
  }
  const auto status = store::record_status_from_string(j["status"].get<std::string>());
  if (!status || *status == store::RecordStatus::kReplaying) return Error{"unknown status in a record state"};
  try {
    s.status = *status;
    s.updated_at = whole(j, "updated_at");
    if (j.contains("audit") && j["audit"].is_array()) {
      for (const auto& e : j["audit"]) {
        s.audit.push_back(store::AuditEntry{whole(e, "at"), e.value("actor", ""), e.value("action", ""),
                                            e.value("detail", "")});
      }
    }
    if (j.contains("redrives") && j["redrives"].is_array()) {
      for (const auto& a : j["redrives"]) s.redrives.push_back(attempt_from_json(a));
    }
    if (s.status == store::RecordStatus::kAllowed && j.contains("allowance") && j["allowance"].is_object()) {
      const json& a = j["allowance"];
      s.allowance = {whole(a, "at"), a.value("actor", ""), a.value("sig", "")};
    }
    s.waiting_entry = j.value("waiting_entry", "");
    s.waiting_revision = whole(j, "waiting_revision");
    if (j.contains("revisions") && j["revisions"].is_array()) {
      for (const auto& v : j["revisions"]) s.revisions.push_back(revision_from_json(v));
    }
    if (j.contains("reproduce") && j["reproduce"].is_object()) {
      s.reproduce_verdict = j["reproduce"].value("verdict", "");
      s.reproduce_runs = whole(j["reproduce"], "runs");
      s.reproduce_matches = whole(j["reproduce"], "matches");
    }
    if (j.contains("minimize") && j["minimize"].is_object()) {
      const json& m = j["minimize"];
      s.minimize = store::MinimizeState{m.value("best_sha256", ""), whole(m, "runs"), whole(m, "elapsed_ms"),
                                        m.value("finished", false)};
      s.minimize_best_at = offset_at(m, "best_at");
    }
    s.minimized_sha256 = j.value("minimized_sha256", "");
    s.minimized_at = offset_at(j, "minimized_at");
    if (j.contains("lease") && j["lease"].is_object()) {
      s.lease_by = j["lease"].value("by", "");
      s.lease_until = whole(j["lease"], "until");
    }
  } catch (const json::exception&) {
    return Error{"a record state with fields of the wrong type"};
  }
  return s;
}

}  // namespace pillbox::broker
