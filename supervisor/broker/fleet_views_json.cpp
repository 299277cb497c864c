#include "supervisor/broker/fleet_views_json.h"

#include "supervisor/ops/quarantine_views_json.h"

namespace pillbox::broker {

std::string fleet_where(const FleetQuarantine& fleet) { return fleet_location(fleet.address(), fleet.keys()); }

nlohmann::json fleet_attempt_history(const FleetRecord& r) {
  nlohmann::json history = nlohmann::json::array();
  std::int64_t n = 0;
  for (const auto& a : r.attempts) {
    n = a.n > 0 ? a.n : n + 1;
    history.push_back(attempt_json(n, a.worker, a.ended_at, a.ended_at, a.kind.empty() ? "released" : a.kind,
                                   a.fingerprint, a.message, a.charged, false));
  }
  for (const auto& a : r.state.redrives) {
    history.push_back(attempt_json(++n, a.worker, a.ended_at, a.ended_at, a.kind, a.fingerprint,
                                   "redrive: entry " + a.entry + " -> " + a.outcome_entry +
                                       (a.message.empty() ? "" : ": " + a.message),
                                   a.charged, false));
  }
  return history;
}

std::vector<store::AuditEntry> fleet_audit_trail(const FleetRecord& r) {
  std::string worker = "a worker";
  if (!r.attempts.empty() && !r.attempts.back().worker.empty()) worker = r.attempts.back().worker;
  std::vector<store::AuditEntry> trail;
  trail.push_back({r.record.created_at, "worker " + worker + (r.group.empty() ? "" : " of group " + r.group),
                   "quarantined",
                   (r.reason.empty() ? std::string("dead-lettered") : r.reason) + " (delivery " +
                       std::to_string(r.deliveries) + " of entry " + r.source_entry + " of " +
                       (r.stream.empty() ? std::string("the stream") : r.stream) + ")"});
  trail.insert(trail.end(), r.state.audit.begin(), r.state.audit.end());
  return trail;
}

nlohmann::json fleet_full_record_json(const FleetQuarantine& fleet, const FleetRecord& r) {
  nlohmann::json j = full_record_json(r.id, r.record, fleet_where(fleet), fleet_attempt_history(r), fleet_audit_trail(r));
  // What only a dead letter knows: where it came from and why.
  j["stream"] = {{"name", r.stream}, {"group", r.group}, {"entry", r.source_entry}, {"deliveries", r.deliveries}};
  j["reason"] = r.reason;
  j["signature"] = to_string(r.signature);
  if (!r.unreadable_state.empty()) j["state_error"] = r.unreadable_state;
  return j;
}

}  // namespace pillbox::broker
