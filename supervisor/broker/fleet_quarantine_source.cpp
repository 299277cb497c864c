#include "supervisor/broker/fleet_quarantine_source.h"

#include <algorithm>

#include "supervisor/broker/fleet_allowance.h"
#include "supervisor/broker/fleet_revisions.h"
#include "supervisor/ops/minimize.h"
#include "supervisor/ops/quarantine_views_json.h"
#include "supervisor/store/quarantine_json.h"

namespace pillbox::broker {
namespace {

// "attempt_history": its deliveries, then its redrives, numbered on from
// them as the store numbers a replay's attempt after the task's.
nlohmann::json attempt_history(const FleetRecord& r) {
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
                                       (a.revision > 0 ? " (revision " + std::to_string(a.revision) + ", a patch)"
                                                       : "") +
                                       (a.message.empty() ? "" : ": " + a.message),
                                   a.charged, false));
  }
  return history;
}

// "audit": the dead-lettering first (the store's first audit entry is the
// quarantine too), then what operators did.
std::vector<store::AuditEntry> audit_trail(const FleetDeadLetters& dead_letters, const FleetRecord& r) {
  std::vector<store::AuditEntry> trail;
  trail.push_back(dead_letters.dead_lettering(r));
  trail.insert(trail.end(), r.state.audit.begin(), r.state.audit.end());
  return trail;
}

}  // namespace

const FleetRecord& FleetQuarantineSource::dead_letter(const SourcedRecord& r) {
  return std::any_cast<const FleetRecord&>(r.native);
}

SourcedRecord FleetQuarantineSource::sourced(FleetRecord r) const {
  return {.id = dead_letters_.id_json(r.id), .record = r.record, .signature = std::string(to_string(r.signature)),
          .state_error = r.unreadable_state, .native = std::move(r)};
}

Status FleetQuarantineSource::each(const store::ListFilter& filter,
                                   const std::function<bool(const SourcedRecord&)>& fn) {
  return each_matching(dead_letters_, filter, [&](const FleetRecord& r) { return fn(sourced(r)); });
}

Expected<std::int64_t> FleetQuarantineSource::each_counted(const store::ListFilter& filter,
                                                           const std::function<void(const SourcedRecord&)>& fn) {
  store::ListFilter all = filter;
  all.limit = -1;
  all.offset = 0;
  std::int64_t total = 0;
  const Status each = each_matching(dead_letters_, all, [&](const FleetRecord& r) {
    if (total >= filter.offset && (filter.limit < 0 || total < filter.offset + filter.limit)) fn(sourced(r));
    ++total;
    return true;
  });
  if (!each) return Error{each.message(), each.code()};
  return total;
}

Expected<std::vector<store::FingerprintStats>> FleetQuarantineSource::stats(const store::ListFilter& filter,
                                                                            std::vector<nlohmann::json>& example_ids) {
  std::vector<std::string> examples;
  auto groups = fleet_stats(dead_letters_, filter, examples);
  if (!groups) return groups;
  example_ids.clear();
  for (const auto& id : examples) example_ids.push_back(dead_letters_.id_json(id));
  return groups;
}

Expected<SourcedRecord> FleetQuarantineSource::get(const std::string& id) {
  auto r = dead_letters_.get(id);
  if (!r) return Error{r.error(), r.error_code()};
  return sourced(std::move(*r));
}

Expected<nlohmann::json> FleetQuarantineSource::full_json(const SourcedRecord& r) {
  const FleetRecord& d = dead_letter(r);
  nlohmann::json j = full_record_json(r.id, d.record, where(), attempt_history(d), audit_trail(dead_letters_, d));
  // What only a dead letter knows: where it came from and why.
  dead_letters_.add_broker_json(d, j);
  j["reason"] = d.reason;
  j["signature"] = to_string(d.signature);
  if (!d.unreadable_state.empty()) j["state_error"] = d.unreadable_state;
  j["revisions"] = fleet_revisions_json(dead_letters_, d);
  if (d.state.status == store::RecordStatus::kAllowed) {
    // Who allowed it is a claim until the fleet's key says so: replay
    // --allowed takes it only on a valid one.
    j["allowance"] = {{"at", iso_time(d.state.allowance.at)},
                      {"actor", d.state.allowance.actor},
                      {"signature", to_string(allowance_signature(dead_letters_, d))}};
  }
  return j;
}

Expected<PayloadBytes> FleetQuarantineSource::payload(const SourcedRecord& r, std::int64_t revision) {
  if (revision > 0) {
    const FleetRecord& d = dead_letter(r);
    for (const FleetRevision& v : d.state.revisions) {
      if (v.n != revision) continue;
      auto bytes = dead_letters_.revision_payload(d, v);
      // Bytes that are not the ones its state names are damage (or a
      // forgery), not the operator's mistake: exit 3, as for the original's.
      if (!bytes) {
        return Error{"revision " + std::to_string(revision) + " of record " + d.id + " cannot be read: " + bytes.error()};
      }
      return PayloadBytes{std::move(*bytes), v.payload_sha256};
    }
    return Error::usage("record " + d.id + " has no revision " + std::to_string(revision) + " (quarantine show " +
                        d.id + hint_options() + " lists them)");
  }
  auto bytes = checked_payload(dead_letter(r));
  if (!bytes) return Error{bytes.error(), bytes.error_code()};
  return PayloadBytes{std::move(*bytes), r.record.entry.payload_sha256};
}

Expected<std::string> FleetQuarantineSource::payload_head(const SourcedRecord& r, std::size_t max_bytes) {
  // The whole is in hand: checked, so that bytes that are not the ones its
  // record names are never shown as its payload.
  auto bytes = checked_payload(dead_letter(r));
  if (!bytes) return Error{bytes.error(), ErrorCode::kUsage};
  bytes->resize(std::min(bytes->size(), max_bytes));
  return bytes;
}

Expected<PayloadBytes> FleetQuarantineSource::minimized_payload(const SourcedRecord& r) {
  return dead_letters_.minimized_payload(dead_letter(r));
}

Status FleetQuarantineSource::check_runnable(const SourcedRecord& r, bool trust_unsigned) const {
  return check_signed(dead_letter(r), trust_unsigned);
}

Status FleetQuarantineSource::check_discardable(const SourcedRecord& r, const std::string& act) {
  const FleetRecord& d = dead_letter(r);
  if (!d.replaying) return Status::ok();
  return Status::error("record " + d.id + " is being replayed right now (by " + d.replaying_by + "); " + act +
                           " it when the replay is over",
                       ErrorCode::kUsage);
}

Expected<Discarded> FleetQuarantineSource::discard(const std::string& id, const std::string& actor,
                                                   const std::string& reason) {
  // One compare-and-set of its state, refused (kUsage) when a replay took
  // its redrive lock in between.
  Discarded done;
  auto changed = dead_letters_.change_state(id, true, [&](FleetState& s, const FleetRecord&) {
    done.was = std::string(to_string(s.status));
    done.already = s.status == store::RecordStatus::kDiscarded;
    if (done.already) return Status::ok();  // written back as it is
    s.status = store::RecordStatus::kDiscarded;
    s.updated_at = store::now_ms();
    s.audit.push_back({s.updated_at, actor, "discarded", reason + " (was " + done.was + ")"});
    return Status::ok();
  });
  if (!changed) return Error{changed.error(), changed.error_code()};
  return done;
}

Expected<Reviewed> FleetQuarantineSource::review(const std::string& id, store::Review review, const std::string& actor,
                                                 const std::string& note) {
  // One compare-and-set of its state, refused (kUsage) while a replay
  // holds its lock.
  Reviewed done;
  auto changed = dead_letters_.change_state(id, true, [&](FleetState& s, const FleetRecord& now) {
    done.was = std::string(to_string(s.status));
    const store::ReviewStep step = store::review_step(now.record.status, review);
    if (!step.refusal.empty()) return Status::error("record " + id + " " + step.refusal, ErrorCode::kUsage);
    done.already = step.already;
    if (done.already) return Status::ok();  // written back as it is
    s.status = step.to;
    s.updated_at = store::now_ms();
    s.allowance = step.to == store::RecordStatus::kAllowed
                      ? make_allowance(dead_letters_.key(), dead_letters_.signed_name(), now, actor, s.updated_at)
                      : FleetAllowance{};
    done.unsigned_allowance = step.to == store::RecordStatus::kAllowed && s.allowance.sig.empty();
    s.audit.push_back({s.updated_at, actor, std::string(store::review_action(review)),
                       (note.empty() ? "" : note + " ") + "(was " + done.was + ")"});
    return Status::ok();
  });
  if (!changed) return Error{changed.error(), changed.error_code()};
  return done;
}

Expected<store::Revision> FleetQuarantineSource::patch(const std::string& id, PatchRequest request) {
  return patch_fleet_record(dead_letters_, id, request, store::now_ms());
}

Status FleetQuarantineSource::record_reproduction(const SourcedRecord& r, const std::string& verdict, std::int64_t runs,
                                                 std::int64_t matches, const std::string& actor,
                                                 const std::string& detail) {
  return broker::record_reproduction(dead_letters_, dead_letter(r).id, verdict, runs, matches, actor, detail);
}

std::unique_ptr<MinimizeKeeper> FleetQuarantineSource::minimize_keeper(const SourcedRecord& r, const std::string& actor) {
  return dead_letters_.minimize_keeper(dead_letter(r).id, actor);
}

Expected<std::vector<PlannedReplay>> FleetQuarantineSource::replay_plan(const ReplayRun& run,
                                                                      std::vector<std::string>& skipped) {
  auto plan = dead_letters_.redrive_plan(run, skipped);
  if (!plan) return Error{plan.error(), plan.error_code()};
  std::vector<PlannedReplay> rows;
  for (auto& r : *plan) {
    const FleetRevision* newest = newest_revision(r.state);
    rows.push_back({dead_letters_.id_json(r.id), std::move(r.record), newest != nullptr ? newest->n : 0});
  }
  return rows;
}

}  // namespace pillbox::broker
