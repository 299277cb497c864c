#include "supervisor/ops/replay.h"

#include <algorithm>
#include <set>

#include "shared/policy_parser.h"
#include "supervisor/ops/payload_runner.h"
#include "supervisor/ops/replay_tally.h"
#include "supervisor/exec/dispatcher.h"
#include "supervisor/store/revision_store.h"

namespace pillbox {
namespace {

using Clock = ReplayTally::Clock;

// One group of a batch: records that run under one config.
class BatchPlanner final : public PayloadPlanner {
 public:
  BatchPlanner(std::vector<const store::QuarantineRecord*> records, std::vector<std::string> payloads,
               ReplayTally& tally,
               std::function<Status(const store::QuarantineRecord&, const Outcome&, std::int64_t started_ms)> done)
      : records_(std::move(records)), payloads_(std::move(payloads)), tally_(tally), done_(std::move(done)) {}

  std::optional<Task> next() override {
    if (stop_ || !error_.is_ok() || next_ >= records_.size()) return std::nullopt;
    if (in_flight_ >= tally_.room() || tally_.not_before()) return std::nullopt;
    tally_.take_turn();
    const std::size_t i = next_++;
    ++in_flight_;
    started_ms_[i] = store::now_ms();
    return Task{records_[i]->entry.key, payloads_[i], i + 1};
  }

  std::optional<Clock::time_point> not_before() const override {
    if (stop_ || next_ >= records_.size() || in_flight_ >= tally_.room()) return std::nullopt;
    return tally_.not_before();
  }

  void on_outcome(const Task& task, const Outcome& outcome) override {
    if (in_flight_ > 0) --in_flight_;
    const std::size_t i = task.ref - 1;
    ++ran_;
    if (outcome.kind != Kind::kOk) ++failed_;
    if (auto s = done_(*records_[i], outcome, started_ms_[i]); !s) error_ = s;
    if (tally_.room() == 0) stop_ = true;
  }

  std::size_t failed() const { return failed_; }
  std::size_t ran() const { return ran_; }
  const Status& error() const { return error_; }

 private:
  std::vector<const store::QuarantineRecord*> records_;
  std::vector<std::string> payloads_;
  ReplayTally& tally_;
  std::function<Status(const store::QuarantineRecord&, const Outcome&, std::int64_t)> done_;
  std::size_t next_ = 0;
  std::size_t in_flight_ = 0;
  std::size_t ran_ = 0;
  std::size_t failed_ = 0;
  bool stop_ = false;
  std::map<std::size_t, std::int64_t> started_ms_;
  Status error_;
};

// What a record replays under: the overrides, or what it recorded.
Expected<ChildConfig> config_for(const store::QuarantineRecord& r, const ReplaySettings& settings) {
  auto choice = handler_or_recorded(r.entry, settings.handler, settings.allowed);
  if (!choice) return Error{choice.error(), choice.error_code()};
  auto policy = policy_or_recorded(r.entry, settings.policy, settings.allowed);
  if (!policy) return Error{policy.error(), policy.error_code()};
  return make_child_config(*choice, std::move(*policy));
}

// Puts the newest revision's payload and handler arguments into `r` (the key
// stays the record's). Call after the claim: a claimed record cannot be
// patched meanwhile. Returns the revision's number, 0 for the original.
Expected<std::int64_t> use_newest_revision(store::RevisionStore& revisions, store::QuarantineRecord& r) {
  auto newest = revisions.latest(r.id);
  if (!newest) return Error{newest.error()};
  if (!*newest) return std::int64_t{0};
  r.entry.payload_sha256 = (*newest)->payload_sha256;
  r.entry.payload_size = (*newest)->payload_size;
  r.entry.handler_args = (*newest)->handler_args;
  return (*newest)->n;
}

// Gives back, when the batch ends early, the claims it did not finish
// (best effort: when the store itself failed, recover_abandoned takes them
// back at the next replay).
class ClaimRelease {
 public:
  ClaimRelease(store::ReplayStore& replays, const std::vector<std::int64_t>& claimed,
               const std::set<std::int64_t>& finished)
      : replays_(replays), claimed_(claimed), finished_(finished) {}
  ClaimRelease(const ClaimRelease&) = delete;
  ClaimRelease& operator=(const ClaimRelease&) = delete;
  ~ClaimRelease() {
    if (!armed_) return;
    for (std::int64_t id : claimed_) {
      if (finished_.count(id) == 0) (void)replays_.release(id, store::now_ms());
    }
  }
  // The batch ended normally: its own code releases what is left.
  void disarm() { armed_ = false; }

 private:
  store::ReplayStore& replays_;
  const std::vector<std::int64_t>& claimed_;
  const std::set<std::int64_t>& finished_;
  bool armed_ = true;
};

}  // namespace

Expected<std::vector<store::QuarantineRecord>> replay_plan(store::ReplayStore& replays, const ReplaySettings& settings,
                                                           std::vector<std::string>& skipped) {
  return replays.select(settings.selection, skipped);
}

Expected<ReplayResult> replay(store::QuarantineStore& quarantine, store::ReplayStore& replays,
                              const ReplaySettings& settings) {
  ReplayResult result;
  auto recovered = replays.recover_abandoned(store::now_ms(), settings.actor);
  if (!recovered) return Error{recovered.error()};
  result.recovered = *recovered;
  auto selected = replays.select(settings.selection, result.skipped);
  if (!selected) return Error{selected.error(), selected.error_code()};
  result.selected = selected->size();
  ReplayTally tally(settings, result, settings.on_progress);
  const std::size_t batch_size = tally.batch_size();
  std::map<std::string, std::int64_t> run_ids;  // per config: the runs row of its attempts
  store::RevisionStore revisions(replays.database());
  std::map<std::int64_t, std::int64_t> revision_of;  // record id -> the revision it ran (absent: the original)
  for (std::size_t first = 0; first < selected->size() && result.stopped_because.empty(); first += batch_size) {
    const std::size_t last = std::min(selected->size(), first + batch_size);
    std::vector<std::int64_t> ids;
    for (std::size_t i = first; i < last; ++i) ids.push_back((*selected)[i].id);
    auto claimed = replays.claim(ids, settings.selection.scope(), store::now_ms());
    if (!claimed) return Error{claimed.error()};
    const std::set<std::int64_t> mine(claimed->begin(), claimed->end());
    result.taken_by_others += ids.size() - mine.size();
    result.not_replayed += ids.size() - mine.size();
    std::set<std::int64_t> finished;
    ClaimRelease release_on_error(replays, *claimed, finished);

    for (std::size_t i = first; i < last; ++i) {
      auto& r = (*selected)[i];
      if (mine.count(r.id) == 0) continue;
      auto revision = use_newest_revision(revisions, r);
      if (!revision) return Error{revision.error()};
      if (*revision > 0) revision_of[r.id] = *revision;
    }
    // The payloads, read once claimed (a patch may have changed which). A
    // record whose payload cannot be read (removed or damaged on disk) is
    // left as it was and reported; the others still run.
    std::map<std::int64_t, std::string> payload_of;
    for (std::size_t i = first; i < last; ++i) {
      const auto& r = (*selected)[i];
      if (mine.count(r.id) == 0) continue;
      auto bytes = quarantine.payloads().get(r.entry.payload_sha256);
      if (!bytes) {
        result.skipped.push_back("record " + std::to_string(r.id) + ": its payload cannot be read (" + bytes.error() +
                                 "); left as it was");
        ++result.unreadable;
        continue;
      }
      payload_of.emplace(r.id, std::move(*bytes));
    }
    // Group the batch by what it runs under: one dispatcher per group. A
    // patch's arguments are part of that (recorded_handler reads them).
    std::map<std::string, std::vector<const store::QuarantineRecord*>> groups;
    for (std::size_t i = first; i < last; ++i) {
      const auto& r = (*selected)[i];
      if (payload_of.count(r.id) == 0) continue;
      // What runs, in two parts: the given handler or the record's own (a
      // --handler that only says a record's plugin again keeps its own,
      // perhaps patched, arguments), and the given policy or the record's.
      const std::string key =
          (replaces_handler(r.entry, settings.handler) ? std::string("given handler")
                                                       : r.entry.handler_identity + "\n" + r.entry.handler_args) +
          "\n" + (settings.policy ? std::string("given policy") : r.entry.policy);
      groups[key].push_back(&r);
    }
    std::size_t batch_ran = 0, batch_failed = 0;
    for (auto& [key, records] : groups) {
      if (!result.stopped_because.empty()) break;
      auto config = config_for(*records.front(), settings);
      if (!config) {
        return Error{"record " + std::to_string(records.front()->id) + " cannot run here: " + config.error(),
                     config.error_code()};
      }
      const std::string identity = handler_identity(*config);
      if (run_ids.count(key) == 0) {
        auto run_id = replays.start_run(identity, policy_identity(config->policy), store::now_ms());
        if (!run_id) return Error{run_id.error()};
        run_ids[key] = *run_id;
      }
      std::vector<std::string> payloads;
      for (auto* r : records) payloads.push_back(std::move(payload_of[r->id]));
      const std::int64_t run_id = run_ids[key];
      auto on_done = [&](const store::QuarantineRecord& r, const Outcome& o, std::int64_t started) -> Status {
        const store::ReplayVerdict verdict =
            o.kind == Kind::kOk ? store::ReplayVerdict::kResolved : store::ReplayVerdict::kFailedAgain;
        store::ReplayAttempt a{started, store::now_ms(), std::string(to_string(o.kind)), o.fingerprint, o.message};
        const auto patched = revision_of.find(r.id);
        const std::int64_t revision = patched == revision_of.end() ? 0 : patched->second;
        const std::string from =
            revision > 0 ? ", from revision " + std::to_string(revision) + " (a patch; the original is unchanged)" : "";
        const std::string detail = verdict == store::ReplayVerdict::kResolved
                                       ? "resolved: ok under " + identity + from
                                       : "failed again: " + a.kind + (o.fingerprint.empty() ? "" : " " + o.fingerprint) +
                                             " under " + identity + from;
        // A replay keeps the result of what it resolved within the default
        // per-result bound and evicts nothing: the next run's --keep-results
        // decides what goes, as it would for its own results.
        if (auto s = replays.finish(r, verdict, a, run_id, settings.actor, detail, revision, o.output,
                                    store::kDefaultKeepResultBytes);
            !s) {
          return s;
        }
        finished.insert(r.id);
        if (settings.on_result) settings.on_result(r, o, verdict, revision);
        tally.count(verdict, o);
        return Status::ok();
      };
      BatchPlanner planner(records, std::move(payloads), tally, on_done);
      const RunSettings run = planned_run_settings(std::move(*config), settings.mode,
                                                   std::min(settings.jobs, records.size()), settings.sandbox_binary);
      auto report = run_planned(run, planner);
      if (!report) return Error{report.error()};
      if (!planner.error().is_ok()) return Error{planner.error().message()};
      batch_ran += planner.ran();
      batch_failed += planner.failed();
      if (report->stop_signal != 0) {
        result.stop_signal = report->stop_signal;
        result.stopped_because = std::string("stopped by ") + stop_signal_name(report->stop_signal);
      } else {
        result.stopped_because = tally.stop_after_reason();
      }
    }
    // What this batch claimed but did not run goes back to its status.
    release_on_error.disarm();
    for (std::int64_t id : *claimed) {
      if (finished.count(id) > 0) continue;
      if (auto s = replays.release(id, store::now_ms()); !s) return Error{s.message()};
      ++result.not_replayed;
    }
    if (result.stopped_because.empty()) result.stopped_because = tally.failure_ratio_reason(batch_failed, batch_ran);
  }
  // Records after the batch that stopped were never claimed: they keep their status.
  const std::size_t accounted = result.replayed + result.not_replayed;
  if (result.selected > accounted) result.not_replayed += result.selected - accounted;
  return result;
}

}  // namespace pillbox
