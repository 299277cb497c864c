#include "supervisor/ops/store_quarantine_source.h"

#include <algorithm>
#include <cerrno>
#include <cstdlib>
#include <optional>

#include "supervisor/ops/minimize.h"
#include "supervisor/ops/quarantine_views_json.h"
#include "supervisor/exec/stop_signals.h"
#include "supervisor/io/result_files.h"
#include "supervisor/store/replay_store.h"
#include "supervisor/store/result_store.h"
#include "supervisor/store/revision_store.h"

namespace pillbox {
namespace {

// The store keeps the progress in its minimize_state table, the payloads in
// its payload store, the result in the record.
class StoreKeeper final : public MinimizeKeeper {
 public:
  StoreKeeper(store::QuarantineStore& quarantine, std::int64_t id, std::string actor)
      : quarantine_(quarantine), id_(id), actor_(std::move(actor)) {}

  Expected<std::optional<Saved>> load() override {
    auto state = quarantine_.minimize_state(id_);
    if (!state) return Error{state.error()};
    if (!*state) return std::optional<Saved>{};
    auto best = quarantine_.payloads().get((*state)->best_sha256);
    if (!best) return Error{best.error()};
    return std::optional<Saved>(Saved{**state, std::move(*best)});
  }
  Status clear() override { return quarantine_.clear_minimize_state(id_); }
  Status save(std::string_view best, const store::MinimizeState& state) override {
    return quarantine_.save_minimize_state(id_, best, state, store::now_ms());
  }
  Status record(const std::string& sha256, const std::string& detail) override {
    return quarantine_.record_minimized(id_, sha256, store::now_ms(), actor_, detail);
  }

 private:
  store::QuarantineStore& quarantine_;
  std::int64_t id_;
  std::string actor_;
};

SourcedRecord sourced(store::QuarantineRecord r) {
  SourcedRecord s;
  s.id = r.id;
  s.record = std::move(r);
  return s;
}

// The store's replay settings for `run`; an id that is not one is an error
// (never dropped: no ids at all is the filter's selection).
Expected<ReplaySettings> replay_settings(const ReplayRun& run) {
  ReplaySettings s;
  for (const auto& id : run.ids) {
    auto n = parse_record_id(id);
    if (!n) return Error{n.error(), ErrorCode::kUsage};
    s.selection.ids.push_back(*n);
  }
  s.selection.filter = run.filter;
  s.selection.force = run.force;
  s.selection.allowed_only = run.allowed_only;
  static_cast<ReplayBrakes&>(s) = run;
  s.handler = run.handler;
  s.policy = run.policy;
  s.allowed = run.allowed;
  s.jobs = run.jobs;
  s.actor = run.actor;
  s.on_progress = run.on_progress;
  return s;
}

}  // namespace

Expected<std::int64_t> parse_record_id(const std::string& text) {
  char* end = nullptr;
  errno = 0;
  const long long id = std::strtoll(text.c_str(), &end, 10);
  // Digits only: strtoll also takes a sign and leading whitespace, and
  // c_str() ends at an embedded NUL.
  const bool digits = std::all_of(text.begin(), text.end(), [](char c) { return c >= '0' && c <= '9'; });
  if (text.empty() || !digits || *end != '\0' || id <= 0 || errno != 0) {
    return Error{"'" + text + "' is not a record id (a positive number, as `pillbox quarantine list` shows)",
                 ErrorCode::kUsage};
  }
  return static_cast<std::int64_t>(id);
}

Expected<std::string> StoreQuarantineSource::parse_id(const std::string& text) const {
  auto id = parse_record_id(text);
  if (!id) return Error{id.error(), ErrorCode::kUsage};
  return std::to_string(*id);
}

Status StoreQuarantineSource::each(const store::ListFilter& filter,
                                   const std::function<bool(const SourcedRecord&)>& fn) {
  return quarantine_.each(filter, [&](const store::QuarantineRecord& r) { return fn(sourced(r)); });
}

Expected<std::vector<store::FingerprintStats>> StoreQuarantineSource::stats(const store::ListFilter& filter,
                                                                            std::vector<nlohmann::json>& example_ids) {
  auto groups = quarantine_.stats(filter);
  if (!groups) return Error{groups.error(), groups.error_code()};
  for (const auto& g : *groups) example_ids.emplace_back(g.example_id);
  return groups;
}

Expected<store::QuarantineRecord> find_store_record(store::QuarantineStore& quarantine, std::int64_t id) {
  auto r = quarantine.get(id);
  if (!r) return Error{r.error(), r.error_code()};
  if (!*r) {
    return Error{"no quarantine record " + std::to_string(id) + " in this store (see: pillbox quarantine list)",
                 ErrorCode::kUsage};
  }
  return std::move(**r);
}

Expected<SourcedRecord> StoreQuarantineSource::get(const std::string& id) {
  auto n = parse_record_id(id);
  if (!n) return Error{n.error(), ErrorCode::kUsage};
  auto r = find_store_record(quarantine_, *n);
  if (!r) return Error{r.error(), r.error_code()};
  return sourced(std::move(*r));
}

Expected<nlohmann::json> StoreQuarantineSource::full_json(const SourcedRecord& r) {
  return stored_record_json(quarantine_, r.record, dir_);
}

Expected<PayloadBytes> StoreQuarantineSource::payload(const SourcedRecord& r, std::int64_t revision) {
  std::string sha = r.record.entry.payload_sha256;
  if (revision > 0) {
    auto revisions = store::RevisionStore(db_).list(r.record.id);
    if (!revisions) return Error{revisions.error(), revisions.error_code()};
    sha.clear();
    for (const auto& v : *revisions) {
      if (v.n == revision) sha = v.payload_sha256;
    }
    if (sha.empty()) {
      return Error{"record " + r.id_text() + " has no revision " + std::to_string(revision) + " (quarantine show " +
                       r.id_text() + " lists them; quarantine patch makes them)",
                   ErrorCode::kUsage};
    }
  }
  auto bytes = quarantine_.payloads().get(sha);  // checked against its hash
  if (!bytes) return Error{bytes.error(), bytes.error_code()};
  return PayloadBytes{std::move(*bytes), sha};
}

Expected<std::string> StoreQuarantineSource::payload_head(const SourcedRecord& r, std::size_t max_bytes) {
  // The first bytes only: a payload may be up to 1 GiB, and anyone who
  // reaches the console may ask for it again and again.
  return quarantine_.payloads().head(r.record.entry.payload_sha256, max_bytes);
}

Expected<PayloadBytes> StoreQuarantineSource::minimized_payload(const SourcedRecord& r) {
  const std::string& sha = r.record.minimized_sha256;
  if (sha.empty()) {
    return Error{"record " + r.id_text() + " has no minimized payload (pillbox minimize " + r.id_text() + ")",
                 ErrorCode::kUsage};
  }
  auto bytes = quarantine_.payloads().get(sha);
  if (!bytes) return Error{bytes.error(), bytes.error_code()};
  return PayloadBytes{std::move(*bytes), sha};
}

Status StoreQuarantineSource::check_discardable(const SourcedRecord& r, const std::string& act) {
  // The claim too: it is what a replay holds a record by.
  auto claim = store::ReplayStore::claim_of(db_, r.record.id);
  if (!claim) return Status::error(claim.error());
  if (r.record.status != store::RecordStatus::kReplaying && claim->empty()) return Status::ok();
  return Status::error("record " + r.id_text() + " is being replayed right now; " + act + " it when the replay is over",
                       ErrorCode::kUsage);
}

Expected<Discarded> StoreQuarantineSource::discard(const std::string& id, const std::string& actor,
                                                   const std::string& reason) {
  auto r = get(id);  // as it is now: a replay may have taken it since it was checked
  if (!r) return Error{r.error(), r.error_code()};
  if (auto ok = check_discardable(*r, "discard"); !ok) return Error{ok.message(), ok.code()};
  Discarded done{r->record.status == store::RecordStatus::kDiscarded, std::string(to_string(r->record.status))};
  if (done.already) return done;  // left as it is
  if (auto s = quarantine_.set_status(r->record.id, store::RecordStatus::kDiscarded, store::now_ms(), actor,
                                      "discarded", reason + " (was " + done.was + ")");
      !s) {
    return Error{s.message(), s.code()};
  }
  return done;
}

Expected<Reviewed> StoreQuarantineSource::review(const std::string& id, store::Review review, const std::string& actor,
                                                 const std::string& note) {
  auto r = get(id);  // as it is now
  if (!r) return Error{r.error(), r.error_code()};
  if (auto ok = check_discardable(*r, review == store::Review::kAllow ? "allow" : "revoke"); !ok) {
    return Error{ok.message(), ok.code()};
  }
  const store::ReviewStep step = store::review_step(r->record.status, review);
  if (!step.refusal.empty()) return Error::usage("record " + r->id_text() + " " + step.refusal);
  Reviewed done{step.already, std::string(to_string(r->record.status))};
  if (done.already) return done;
  const std::string detail = (note.empty() ? "" : note + " ") + "(was " + done.was + ")";
  auto txn = store::Transaction::begin(db_.handle());
  if (!txn) return Error{txn.error()};
  auto changed = quarantine_.change_status(r->record.id, r->record.status, step.to, store::now_ms(), actor,
                                           std::string(store::review_action(review)), detail);
  if (!changed) return Error{changed.error(), changed.error_code()};
  if (!*changed) {
    return Error::usage("record " + r->id_text() + " changed while it was reviewed (a replay took it, or another "
                        "operator acted); nothing changed: look again (pillbox quarantine show " + r->id_text() + ")");
  }
  if (auto s = txn->commit(); !s) return Error{s.message()};
  return done;
}

Expected<store::Revision> StoreQuarantineSource::patch(const std::string& id, PatchRequest request) {
  auto number = parse_record_id(id);
  if (!number) return Error::usage(number.error());
  request.record_id = *number;
  return patch_record(db_, quarantine_, request, store::now_ms());
}

Status StoreQuarantineSource::record_reproduction(const SourcedRecord& r, const std::string& verdict, std::int64_t runs,
                                                 std::int64_t matches, const std::string& actor,
                                                 const std::string& detail) {
  return quarantine_.record_reproduction(r.record.id, verdict, runs, matches, store::now_ms(), actor, detail);
}

std::unique_ptr<MinimizeKeeper> StoreQuarantineSource::minimize_keeper(const SourcedRecord& r, const std::string& actor) {
  return std::make_unique<StoreKeeper>(quarantine_, r.record.id, actor);
}

Expected<std::vector<PlannedReplay>> StoreQuarantineSource::replay_plan(const ReplayRun& run,
                                                                      std::vector<std::string>& skipped) {
  auto settings = replay_settings(run);
  if (!settings) return Error{settings.error(), settings.error_code()};
  store::ReplayStore replays(db_, quarantine_);
  auto plan = pillbox::replay_plan(replays, *settings, skipped);
  if (!plan) return Error{plan.error(), plan.error_code()};
  std::vector<PlannedReplay> rows;
  store::RevisionStore patches(db_);
  for (auto& r : *plan) {
    auto newest = patches.latest(r.id);  // what it would run: its newest patch, or the original
    if (!newest) return Error{newest.error()};
    rows.push_back({r.id, std::move(r), *newest ? (*newest)->n : 0});
  }
  return rows;
}

Expected<ReplayResult> StoreQuarantineSource::replay(const ReplayRun& run) {
  auto checked = replay_settings(run);
  if (!checked) return Error{checked.error(), checked.error_code()};
  ReplaySettings& settings = *checked;
  store::ReplayStore replays(db_, quarantine_);
  std::optional<store::ResultStore> results;  // how --out names a result, as `run --out` would
  if (run.name_results) {
    if (auto opened = store::ResultStore::open(db_)) results.emplace(std::move(*opened));
  }
  settings.on_result = [&](const store::QuarantineRecord& r, const Outcome& o, store::ReplayVerdict verdict,
                           std::int64_t revision) {
    if (!run.on_result) return;
    // KEY~HASH when an earlier task has the key with another payload.
    std::string variant;
    if (results && verdict == store::ReplayVerdict::kResolved) {
      if (auto sha = results->reused_key_payload(r.entry.task_id); sha && !sha->empty()) {
        variant = std::string(result_variant(*sha));
      }
    }
    const nlohmann::json id = r.id;
    run.on_result(ReplayedRecord{id, r, o, verdict, revision, "", std::move(variant)});
  };
  // For the whole replay, not only while payloads run (payload_runner's
  // own): SIGTERM between two batches (a console job stopped, its serve
  // gone) would otherwise kill it with the next batch's records claimed.
  // The batch after it sees the signal at once and stops; its claims go back.
  StopSignals whole_replay;
  return pillbox::replay(quarantine_, replays, settings);
}

}  // namespace pillbox
