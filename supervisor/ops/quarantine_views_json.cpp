#include "supervisor/ops/quarantine_views_json.h"

#include <map>

#include "shared/base64.h"
#include "supervisor/ops/raise_site_rollup.h"
#include "supervisor/store/quarantine_json.h"

namespace pillbox {

nlohmann::json record_list_json(const nlohmann::json& id, const store::QuarantineRecord& r, const std::string& where) {
  nlohmann::json j = nlohmann::json::parse(quarantine_record_json(r, 0, false, where));
  j["id"] = id;
  return j;
}

nlohmann::json sourced_list_json(const SourcedRecord& r, const std::string& where) {
  nlohmann::json j = record_list_json(r.id, r.record, where);
  if (!r.signature.empty()) j["signature"] = r.signature;
  if (!r.state_error.empty()) j["state_error"] = r.state_error;
  return j;
}

nlohmann::json attempt_json(std::int64_t n, const nlohmann::json& run, std::int64_t started_at, std::int64_t ended_at,
                            const std::string& kind, const std::string& fingerprint, const std::string& message,
                            bool charged, bool solo, std::string_view stderr_tail) {
  auto time = [](std::int64_t ms) { return ms != 0 ? nlohmann::json(iso_time(ms)) : nlohmann::json(nullptr); };
  return {{"n", n},
          {"run", run},
          {"started_at", time(started_at)},
          {"ended_at", time(ended_at)},
          {"kind", ended_at != 0 ? nlohmann::json(kind) : nlohmann::json("unfinished")},
          {"fingerprint", fingerprint.empty() ? nlohmann::json(nullptr) : nlohmann::json(fingerprint)},
          {"message", message},
          {"charged", charged},
          {"solo", solo},
          {"stderr_tail", stderr_tail.empty() ? nlohmann::json(nullptr) : nlohmann::json(std::string(stderr_tail))}};
}

nlohmann::json full_record_json(const nlohmann::json& id, const store::QuarantineRecord& r, const std::string& where,
                                nlohmann::json attempt_history, const std::vector<store::AuditEntry>& audit) {
  nlohmann::json j = record_list_json(id, r, where);
  j.erase("new_fingerprint");
  j["policy"] = r.entry.policy;
  // Raw bytes of the child's; invalid UTF-8 comes out as U+FFFD (dump()).
  j["stderr_tail"] = r.entry.stderr_tail;
  j["attempt_history"] = std::move(attempt_history);
  nlohmann::json trail = nlohmann::json::array();
  for (const auto& e : audit) {
    trail.push_back({{"at", iso_time(e.at)}, {"actor", e.actor}, {"action", e.action}, {"detail", e.detail}});
  }
  j["audit"] = trail;
  return j;
}

Expected<nlohmann::json> stored_record_json(store::QuarantineStore& quarantine, const store::QuarantineRecord& r,
                                            const std::string& store_dir) {
  auto attempts = quarantine.attempts(r.entry.task_id);
  if (!attempts) return Error{attempts.error()};
  auto audit = quarantine.audit_trail(r.id);
  if (!audit) return Error{audit.error()};
  nlohmann::json history = nlohmann::json::array();
  for (const auto& a : *attempts) {
    history.push_back(attempt_json(a.n, a.run_id, a.started_at, a.ended_at, a.kind, a.fingerprint, a.message,
                                   a.charged, a.solo, a.stderr_tail));
  }
  auto revisions = store::RevisionStore(quarantine.database()).list(r.id);
  if (!revisions) return Error{revisions.error()};
  nlohmann::json full = full_record_json(r.id, r, store_dir, std::move(history), *audit);
  nlohmann::json patches = nlohmann::json::array();
  for (const auto& v : *revisions) patches.push_back(revision_json(v));
  full["revisions"] = std::move(patches);
  return full;
}

nlohmann::json revision_json(const store::Revision& v) {
  nlohmann::json args = nlohmann::json::parse(v.handler_args, nullptr, false);
  if (args.is_discarded()) args = v.handler_args;  // unreadable: shown as the text it is
  return {{"n", v.n},
          {"at", iso_time(v.created_at)},
          {"actor", v.actor},
          {"note", v.note},
          {"summary", v.summary},
          {"payload_sha256", v.payload_sha256},
          {"payload_size", v.payload_size},
          {"handler_args", args}};
}

nlohmann::json patched_record_json(const store::Revision& v, const nlohmann::json& record_id) {
  nlohmann::json j = revision_json(v);
  j["record_id"] = record_id;
  return j;
}

nlohmann::json shown_record_json(nlohmann::json full, const std::string& payload) {
  full["payload_head_b64"] = base64_encode(std::string_view(payload).substr(0, kPayloadHeadBytes));
  return full;
}

namespace {

nlohmann::json group_json(const store::FingerprintStats& g, const nlohmann::json& example_id) {
  nlohmann::json by_status = nlohmann::json::object();
  for (store::RecordStatus s : store::kAllRecordStatuses) {
    const auto n = g.by_status.find(s);
    by_status[std::string(to_string(s))] = n == g.by_status.end() ? 0 : n->second;
  }
  nlohmann::json j = {{"fingerprint", g.fingerprint},       {"kind", g.kind},
                      {"records", g.records},               {"open", g.open},
                      {"repeats", g.repeats},               {"first_seen", iso_time(g.first_ms)},
                      {"last_seen", iso_time(g.last_ms)},   {"example_id", example_id},
                      {"message", g.message},               {"by_status", std::move(by_status)}};
  // The example's crash state; a record's text is a claim: anything but an
  // array shows as none.
  auto state = nlohmann::json::parse(g.crash_state, nullptr, false);
  j["crash_state"] = state.is_array() ? state : nlohmann::json::array();
  if (!g.by_day.empty()) {
    nlohmann::json days = nlohmann::json::array();
    for (std::size_t i = 0; i < g.by_day.size(); ++i) {
      const std::int64_t day = g.first_day_ms + static_cast<std::int64_t>(i) * store::kDayMs;
      days.push_back({{"day", iso_time(day).substr(0, 10)}, {"records", g.by_day[i]}});
    }
    j["by_day"] = std::move(days);
  }
  return j;
}

}  // namespace

std::vector<nlohmann::json> fingerprint_stats_json(const std::vector<store::FingerprintStats>& groups,
                                                   const std::vector<nlohmann::json>& example_ids) {
  const std::vector<RaiseSite> sites = raise_sites(groups);
  std::map<std::string, std::size_t> sharing;
  for (const RaiseSite& site : sites) ++sharing[site.id];
  std::vector<nlohmann::json> out;
  for (std::size_t i = 0; i < groups.size(); ++i) {
    nlohmann::json j = group_json(groups[i], example_ids.at(i));
    const bool none = sites[i].id.empty();
    j["raise_site"] = none ? nlohmann::json() : nlohmann::json(sites[i].text);
    j["raise_site_id"] = none ? nlohmann::json() : nlohmann::json(sites[i].id);
    j["raise_site_groups"] = none ? 1 : sharing[sites[i].id];
    out.push_back(std::move(j));
  }
  return out;
}

}  // namespace pillbox
