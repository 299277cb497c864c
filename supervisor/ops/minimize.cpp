#include "supervisor/ops/minimize.h"

#include <map>
#include <optional>

#include "shared/sha256.h"
#include "supervisor/exec/stop_signals.h"
#include "supervisor/io/terminal_text.h"
#include "supervisor/ops/payload_runner.h"
#include "supervisor/ops/quarantined_payload.h"
#include "supervisor/ops/reproduce.h"

namespace pillbox {
namespace {

using Clock = std::chrono::steady_clock;

std::size_t largest_power_of_two_at_most(std::size_t n) {
  std::size_t p = 1;
  while (p * 2 <= n) p *= 2;
  return p;
}

// The search. Candidates are built from the current best payload; several
// run at once. When one still fails the same way it becomes the best, and
// candidates still in flight that were built from the old best are ignored
// when they end (they describe a payload that is no longer the one shrunk).
class Shrinker final : public PayloadPlanner {
 public:
  enum class Phase { kVerify, kDelete, kSimplify, kDone };

  Shrinker(const store::QuarantineEntry& record, std::string start, const MinimizeSettings& settings,
           std::int64_t runs_before, std::chrono::milliseconds elapsed_before,
           std::function<Expected<bool>(const std::string& best, std::int64_t runs)> save)
      : record_(record),
        best_(std::move(start)),
        settings_(settings),
        runs_before_(runs_before),
        elapsed_before_(elapsed_before),
        save_(std::move(save)),
        started_(Clock::now()) {}

  std::optional<Task> next() override {
    if (phase_ == Phase::kDone || !error_.is_ok()) return std::nullopt;
    if (budget_spent()) return std::nullopt;
    std::optional<std::string> candidate;
    std::size_t at = 0;
    if (phase_ == Phase::kVerify) {
      if (verify_started_) return std::nullopt;
      verify_started_ = true;
      candidate = best_;
    } else if (phase_ == Phase::kDelete) {
      while (!candidate) {
        if (pos_ < best_.size()) {
          at = pos_;
          const std::size_t len = std::min(block_, best_.size() - pos_);
          candidate = best_.substr(0, pos_) + best_.substr(pos_ + len);
          pos_ += block_;
        } else if (in_flight_current() > 0) {
          return std::nullopt;  // a success could still change the best: wait for it
        } else if (block_ > 1) {
          block_ /= 2;
          pos_ = 0;
        } else if (changed_in_round_ && best_.size() > 1) {
          // Something went in this round: another round may take more.
          changed_in_round_ = false;
          block_ = largest_power_of_two_at_most(std::max<std::size_t>(1, best_.size() / 2));
          pos_ = 0;
        } else {
          phase_ = Phase::kSimplify;
          pos_ = 0;
          return next();
        }
      }
    } else if (phase_ == Phase::kSimplify) {
      while (pos_ < best_.size() && best_[pos_] == '0') ++pos_;
      if (pos_ < best_.size()) {
        at = pos_;
        candidate = best_;
        (*candidate)[pos_] = '0';
        ++pos_;
      } else if (in_flight_current() > 0) {
        return std::nullopt;
      } else {
        phase_ = Phase::kDone;
        return std::nullopt;
      }
    }
    const std::uint64_t ref = ++next_ref_;
    flight_[ref] = {generation_, at, *candidate};
    ++started_runs_;
    return Task{record_.key, std::move(*candidate), ref};
  }

  void on_outcome(const Task& task, const Outcome& outcome) override {
    ++runs_;
    auto it = flight_.find(task.ref);
    if (it == flight_.end()) return;
    const Flight f = std::move(it->second);
    flight_.erase(it);
    const bool same = same_failure(record_, outcome);
    if (phase_ == Phase::kVerify) {
      if (!same) {
        // What it got instead, in the child's words (made inert): "does not
        // fail the same way" alone leaves the operator guessing why.
        std::string got = outcome_label(std::string(to_string(outcome.kind)), outcome.fingerprint);
        if (!outcome.message.empty()) got += ": " + table_cell(outcome.message.substr(0, outcome.message.find('\n')), 300);
        std::string why = "the payload does not fail the same way now: " + record_.kind + " " + record_.fingerprint +
                          " expected; got " + got;
        if (const std::string hint = missing_working_dir_hint(record_); !hint.empty()) why += "; " + hint;
        error_ = Status::error(why + "; see `pillbox reproduce` (a flaky payload cannot be minimized reliably)",
                               ErrorCode::kUsage);
        return;
      }
      phase_ = Phase::kDelete;
      block_ = largest_power_of_two_at_most(std::max<std::size_t>(1, best_.size() / 2));
      pos_ = 0;
    } else if (same && f.generation == generation_ && f.bytes.size() <= best_.size() && f.bytes != best_) {
      best_ = f.bytes;
      ++generation_;
      changed_in_round_ = true;
      // Deletion: what followed the removed block now sits where it was.
      if (phase_ == Phase::kDelete) pos_ = f.at;
      unsaved_ = true;
    }
    if (unsaved_) {
      // Saved now, or offered again when the next run ends (a keeper that
      // saved a moment ago may wait: MinimizeKeeper::saves_progress_now).
      auto saved = save_(best_, total_runs());
      if (!saved) error_ = Status::error(saved.error(), saved.error_code());
      unsaved_ = saved && !*saved;
    }
    if (settings_.on_progress) settings_.on_progress(total_runs(), best_.size());
  }

  bool budget_spent() {
    if (settings_.max_runs > 0 && runs_before_ + started_runs_ >= settings_.max_runs) {
      stopped_by_ = "--max-runs";
      return true;
    }
    if (elapsed() >= settings_.max_time) {
      stopped_by_ = "--max-time";
      return true;
    }
    return false;
  }

  std::chrono::milliseconds elapsed() const {
    return elapsed_before_ + std::chrono::duration_cast<std::chrono::milliseconds>(Clock::now() - started_);
  }
  std::int64_t total_runs() const { return runs_before_ + runs_; }
  std::int64_t runs_now() const { return runs_; }
  const std::string& best() const { return best_; }
  bool done() const { return phase_ == Phase::kDone; }
  const Status& error() const { return error_; }
  const std::string& stopped_by() const { return stopped_by_; }

 private:
  struct Flight {
    std::uint64_t generation = 0;
    std::size_t at = 0;
    std::string bytes;
  };

  std::size_t in_flight_current() const {
    std::size_t n = 0;
    for (const auto& [ref, f] : flight_) n += f.generation == generation_ ? 1 : 0;
    return n;
  }

  const store::QuarantineEntry& record_;
  std::string best_;
  const MinimizeSettings& settings_;
  std::int64_t runs_before_;
  std::chrono::milliseconds elapsed_before_;
  std::function<Expected<bool>(const std::string&, std::int64_t)> save_;  // true: saved
  Clock::time_point started_;

  Phase phase_ = Phase::kVerify;
  bool verify_started_ = false;
  std::size_t block_ = 1;
  std::size_t pos_ = 0;
  bool changed_in_round_ = false;
  bool unsaved_ = false;  // best_ improved since it was last saved
  std::uint64_t generation_ = 0;
  std::uint64_t next_ref_ = 0;
  std::map<std::uint64_t, Flight> flight_;
  std::int64_t runs_ = 0;
  std::int64_t started_runs_ = 0;
  Status error_;
  std::string stopped_by_;
};

}  // namespace

bool same_failure(const store::QuarantineEntry& record, const Outcome& outcome) {
  if (outcome.kind == Kind::kOk) return false;
  // Resource limits: where the limit struck says little.
  const std::optional<Kind> recorded = kind_from_string(record.kind);
  if (recorded == Kind::kCpuLimit || recorded == Kind::kWallTimeout || recorded == Kind::kOom) {
    return outcome.kind == *recorded;
  }
  return outcome.fingerprint == record.fingerprint;
}

Expected<MinimizeResult> minimize_payload(const store::QuarantineRecord& record, Expected<ChildConfig> config,
                                          std::string payload, MinimizeKeeper& keeper,
                                          const MinimizeSettings& settings) {
  MinimizeResult result;
  result.original_size = payload.size();
  std::string start = std::move(payload);
  std::int64_t runs_before = 0;
  std::chrono::milliseconds elapsed_before{0};
  if (settings.restart) {
    if (auto s = keeper.clear(); !s) return Error{s.message()};
  } else {
    auto saved = keeper.load();
    if (!saved) return Error{saved.error()};
    if (*saved) {
      const store::MinimizeState& state = (*saved)->state;
      start = std::move((*saved)->best);
      runs_before = state.runs;
      elapsed_before = std::chrono::milliseconds(state.elapsed_ms);
      result.resumed = true;
      if (state.finished) {
        // Nothing left to search: report what was found (--restart searches again).
        result.minimized_size = start.size();
        result.minimized_sha256 = state.best_sha256;
        result.runs = runs_before;
        result.elapsed_ms = state.elapsed_ms;
        result.finished = true;
        return result;
      }
    }
  }

  if (!config) return Error{config.error(), config.error_code()};
  RunSettings run = planned_run_settings(std::move(*config), settings.mode, settings.jobs, settings.sandbox_binary);
  run.identity = record.entry.handler_identity;

  const auto session_started = Clock::now();
  auto elapsed_ms = [&] {
    return elapsed_before.count() +
           std::chrono::duration_cast<std::chrono::milliseconds>(Clock::now() - session_started).count();
  };
  auto save = [&](const std::string& best, std::int64_t runs) -> Expected<bool> {
    if (!keeper.saves_progress_now()) return false;
    store::MinimizeState state{sha256_hex(best), runs, elapsed_ms(), false};
    if (auto s = keeper.save(best, state); !s) return Error{s.message(), s.code()};
    return true;
  };
  Shrinker shrinker(record.entry, start, settings, runs_before, elapsed_before, save);
  auto report = run_planned(run, shrinker);
  if (!report) return Error{report.error()};
  if (!shrinker.error().is_ok()) return Error{shrinker.error().message(), shrinker.error().code()};

  result.stop_signal = report->stop_signal;
  result.finished = shrinker.done() && result.stop_signal == 0;
  result.stopped_by = result.stop_signal != 0 ? stop_signal_name(result.stop_signal)
                      : result.finished      ? ""
                                             : shrinker.stopped_by();
  result.runs = shrinker.total_runs();
  result.runs_now = shrinker.runs_now();
  result.elapsed_ms = elapsed_ms();
  result.minimized_size = shrinker.best().size();
  result.minimized_sha256 = sha256_hex(shrinker.best());
  // The state, whatever ended the session: a later session resumes from it.
  store::MinimizeState state{result.minimized_sha256, result.runs, result.elapsed_ms, result.finished};
  if (auto s = keeper.save(shrinker.best(), state); !s) return Error{s.message()};
  if (result.minimized_size < result.original_size && result.minimized_sha256 != record.minimized_sha256) {
    const std::string detail = "from " + std::to_string(result.original_size) + " to " +
                               std::to_string(result.minimized_size) + " bytes in " + std::to_string(result.runs) +
                               " runs" + (result.finished ? "" : " (not finished: " + result.stopped_by + ")");
    if (auto s = keeper.record(result.minimized_sha256, detail); !s) return Error{s.message()};
  }
  return result;
}

Expected<MinimizeResult> minimize_record(QuarantineSource& quarantine, const SourcedRecord& r,
                                         const MinimizeSettings& settings) {
  auto payload = quarantine.payload(r);
  if (!payload) return Error{payload.error(), payload.error_code()};
  auto keeper = quarantine.minimize_keeper(r, settings.actor);
  return minimize_payload(r.record, recorded_config_of(r, settings.policy, settings.allowed),
                          std::move(payload->bytes), *keeper, settings);
}

}  // namespace pillbox
