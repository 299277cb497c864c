#include "supervisor/broker/fleet_quarantine_source.h"

#include <algorithm>

#include "shared/sha256.h"
#include "supervisor/broker/fleet_redrive.h"
#include "supervisor/ops/minimize.h"
#include "supervisor/ops/quarantine_views_json.h"

namespace pillbox::broker {
namespace {

SourcedRecord sourced(FleetRecord r) {
  return {.id = r.id, .record = r.record, .signature = std::string(to_string(r.signature)),
          .state_error = r.unreadable_state, .native = std::move(r)};
}

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
                                       (a.message.empty() ? "" : ": " + a.message),
                                   a.charged, false));
  }
  return history;
}

// "audit": the worker's dead-lettering first (the store's first audit entry
// is the quarantine too), then what operators did.
std::vector<store::AuditEntry> audit_trail(const FleetRecord& r) {
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

// Minimize's progress and result kept on Redis as the store keeps them: the
// search's progress in the record's state, the best payload so far under
// keys().minimizing(id), the result under keys().minimized(id) with its
// sha256 and an audit entry in the state.
class FleetMinimizeKeeper final : public MinimizeKeeper {
 public:
  FleetMinimizeKeeper(FleetQuarantine& quarantine, std::string id, std::string actor)
      : q_(quarantine), id_(std::move(id)), actor_(std::move(actor)) {}

  // A saved best payload whose bytes do not match the state's sha256 (a
  // session that died between writing the two) is no progress: it starts over.
  Expected<std::optional<Saved>> load() override {
    auto record = q_.get(id_);
    if (!record) return Error{record.error(), record.error_code()};
    const auto& progress = record->state.minimize;
    if (!progress) return std::optional<Saved>{};
    auto best = q_.redis().command({"GET", q_.keys().minimizing(id_)});
    if (!best) return Error{best.error()};
    std::string bytes = reply_text(best->get());
    if (sha256_hex(bytes) != progress->best_sha256) return std::optional<Saved>{};
    return std::optional<Saved>(Saved{*progress, std::move(bytes)});
  }

  Status clear() override {
    auto changed = q_.change_state(id_, false, [](FleetState& s, const FleetRecord&) {
      s.minimize.reset();
      return Status::ok();
    });
    if (!changed) return changed.status();
    auto deleted = q_.redis().command({"DEL", q_.keys().minimizing(id_)});
    return deleted ? Status::ok() : Status::error(deleted.error());
  }

  // The bytes first, then the state that names them.
  Status save(std::string_view best, const store::MinimizeState& state) override {
    if (auto set = q_.redis().command({"SET", q_.keys().minimizing(id_), best}); !set) return Status::error(set.error());
    return q_.change_state(id_, false, [&](FleetState& s, const FleetRecord&) {
      s.minimize = state;
      return Status::ok();
    }).status();
  }

  Status record(const std::string& sha256, const std::string& detail) override {
    // minimize_payload saved this payload just before: the best so far is it.
    auto copied = q_.redis().command({"COPY", q_.keys().minimizing(id_), q_.keys().minimized(id_), "REPLACE"});
    if (!copied) return Status::error(copied.error());
    return q_.change_state(id_, false, [&](FleetState& s, const FleetRecord&) {
      s.minimized_sha256 = sha256;
      s.updated_at = store::now_ms();
      s.audit.push_back({s.updated_at, actor_, "minimized", detail});
      return Status::ok();
    }).status();
  }

 private:
  FleetQuarantine& q_;
  std::string id_;
  std::string actor_;
};

}  // namespace

const FleetRecord& FleetQuarantineSource::dead_letter(const SourcedRecord& r) {
  return std::any_cast<const FleetRecord&>(r.native);
}

std::string FleetQuarantineSource::where() const { return fleet_location(fleet_.address(), fleet_.keys()); }

Status FleetQuarantineSource::each(const store::ListFilter& filter,
                                   const std::function<bool(const SourcedRecord&)>& fn) {
  return fleet_.each(filter, [&](const FleetRecord& r) { return fn(sourced(r)); });
}

Expected<std::int64_t> FleetQuarantineSource::each_counted(const store::ListFilter& filter,
                                                           const std::function<void(const SourcedRecord&)>& fn) {
  store::ListFilter all = filter;
  all.limit = -1;
  all.offset = 0;
  std::int64_t total = 0;
  const Status each = fleet_.each(all, [&](const FleetRecord& r) {
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
  auto groups = fleet_.stats(filter, examples);
  if (!groups) return groups;
  example_ids.assign(examples.begin(), examples.end());
  return groups;
}

Expected<SourcedRecord> FleetQuarantineSource::get(const std::string& id) {
  auto r = fleet_.get(id);
  if (!r) return Error{r.error(), r.error_code()};
  return sourced(std::move(*r));
}

Expected<nlohmann::json> FleetQuarantineSource::full_json(const SourcedRecord& r) {
  const FleetRecord& d = dead_letter(r);
  nlohmann::json j = full_record_json(d.id, d.record, where(), attempt_history(d), audit_trail(d));
  // What only a dead letter knows: where it came from and why.
  j["stream"] = {{"name", d.stream}, {"group", d.group}, {"entry", d.source_entry}, {"deliveries", d.deliveries}};
  j["reason"] = d.reason;
  j["signature"] = to_string(d.signature);
  if (!d.unreadable_state.empty()) j["state_error"] = d.unreadable_state;
  return j;
}

Expected<PayloadBytes> FleetQuarantineSource::payload(const SourcedRecord& r, std::int64_t revision) {
  if (revision > 0) {
    return Error{"--revision does not apply with --redis: revisions are the store's (quarantine patch)",
                 ErrorCode::kUsage};
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
  const std::string& id = dead_letter(r).id;
  const std::string& sha = r.record.minimized_sha256;
  if (sha.empty()) {
    return Error{"record " + id + " has no minimized payload (pillbox minimize " + id + hint_options() + ")",
                 ErrorCode::kUsage};
  }
  auto bytes = fleet_.redis().command({"GET", fleet_.keys().minimized(id)});
  if (!bytes) return Error{bytes.error()};
  std::string payload = reply_text(bytes->get());
  if (sha256_hex(payload) != sha) {
    return Error{"the minimized payload of record " + id + " (" + fleet_.keys().minimized(id) +
                 ") does not match the sha256 its state names (" + sha + ")"};
  }
  return PayloadBytes{std::move(payload), sha};
}

std::string FleetQuarantineSource::hint_options() const { return " --redis URL --stream " + fleet_.keys().stream.stream; }

Status FleetQuarantineSource::check_runnable(const SourcedRecord& r, bool trust_unsigned) const {
  return check_signed(dead_letter(r), trust_unsigned);
}

Status FleetQuarantineSource::check_discardable(const SourcedRecord& r) {
  const FleetRecord& d = dead_letter(r);
  if (!d.replaying) return Status::ok();
  return Status::error("record " + d.id + " is being replayed right now (by " + d.replaying_by +
                           "); discard it when the replay is over",
                       ErrorCode::kUsage);
}

Expected<Discarded> FleetQuarantineSource::discard(const std::string& id, const std::string& actor,
                                                   const std::string& reason) {
  // One compare-and-set of its state, refused (kUsage) when a replay took
  // its redrive lock in between.
  Discarded done;
  auto changed = fleet_.change_state(id, true, [&](FleetState& s, const FleetRecord&) {
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

Expected<store::Revision> FleetQuarantineSource::patch(const std::string&, PatchRequest) {
  return Error::usage(store_only_verb("patch"));  // revisions are the store's
}

Status FleetQuarantineSource::record_reproduction(const SourcedRecord& r, const std::string& verdict, std::int64_t runs,
                                                 std::int64_t matches, const std::string& actor,
                                                 const std::string& detail) {
  return fleet_.record_reproduction(dead_letter(r).id, verdict, runs, matches, actor, detail);
}

std::unique_ptr<MinimizeKeeper> FleetQuarantineSource::minimize_keeper(const SourcedRecord& r, const std::string& actor) {
  return std::make_unique<FleetMinimizeKeeper>(fleet_, dead_letter(r).id, actor);
}

Expected<std::vector<PlannedReplay>> FleetQuarantineSource::replay_plan(const ReplayRun& run,
                                                                      std::vector<std::string>& skipped) {
  auto plan = redrive_plan(fleet_, run, skipped);
  if (!plan) return Error{plan.error(), plan.error_code()};
  std::vector<PlannedReplay> rows;
  for (auto& r : *plan) rows.push_back({r.id, std::move(r.record), 0});
  return rows;
}

Expected<ReplayResult> FleetQuarantineSource::replay(const ReplayRun& run) { return redrive(fleet_, run); }

}  // namespace pillbox::broker
