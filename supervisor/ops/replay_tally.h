#pragma once
// A replay's brakes (ReplayBrakes) at work, written once for both
// quarantines: the store's replay runs payloads here (replay.h), the fleet's
// redrives them to its workers (supervisor/broker/fleet_redrive.h).
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <functional>
#include <limits>
#include <optional>
#include <string>

#include "supervisor/ops/replay.h"

namespace pillbox {

// One replay's counts, kept in its ReplayResult, and what they decide.
class ReplayTally {
 public:
  using Clock = std::chrono::steady_clock;

  ReplayTally(const ReplayBrakes& brakes, ReplayResult& result,
              std::function<void(std::size_t done, std::size_t total)> on_progress)
      : brakes_(brakes), result_(result), on_progress_(std::move(on_progress)) {}

  std::size_t batch_size() const { return std::max<std::size_t>(1, brakes_.batch); }

  // A replayed record: replayed, resolved or failed again (by its
  // fingerprint, its kind when it has none); then the progress is told.
  void count(store::ReplayVerdict verdict, const Outcome& outcome) {
    ++result_.replayed;
    if (verdict == store::ReplayVerdict::kResolved) {
      ++result_.resolved;
    } else {
      ++result_.failed_again;
      ++result_.failures_by_fingerprint[outcome.fingerprint.empty() ? std::string(to_string(outcome.kind))
                                                                    : outcome.fingerprint];
    }
    if (on_progress_) on_progress_(result_.replayed, result_.selected);
  }

  // --stop-after K: how many more may be in flight, never more than could
  // still fail, so that exactly K failures of one fingerprint stop it, not K
  // plus whatever was running. 0: it stops; without K, no limit.
  std::size_t room() const {
    if (brakes_.stop_after == 0) return std::numeric_limits<std::size_t>::max();
    std::size_t worst = 0;
    for (const auto& [fp, n] : result_.failures_by_fingerprint) worst = std::max(worst, n);
    return worst >= brakes_.stop_after ? 0 : brakes_.stop_after - worst;
  }

  // Why --stop-after stops it, "" while it does not. It names the first
  // fingerprint with K: room() lets only one reach K, but the outcomes of an
  // earlier replay's redrives, counted before anything starts, can bring
  // several there at once.
  std::string stop_after_reason() const {
    if (room() > 0) return "";
    const std::string k = std::to_string(brakes_.stop_after);
    for (const auto& [fp, n] : result_.failures_by_fingerprint) {
      if (n >= brakes_.stop_after) return k + " replayed payloads failed again with " + fp + " (--stop-after " + k + ")";
    }
    return "";
  }

  // Why --max-failure-ratio stops it after a batch of which `failed` of
  // `ran` failed again, "" when it does not.
  std::string failure_ratio_reason(std::size_t failed, std::size_t ran) const {
    if (ran == 0 || !(static_cast<double>(failed) / static_cast<double>(ran) > brakes_.max_failure_ratio)) return "";
    char ratio[256];
    std::snprintf(ratio, sizeof ratio, "%zu of %zu payloads of a batch failed again (more than --max-failure-ratio %.2f)",
                  failed, ran, brakes_.max_failure_ratio);
    return ratio;
  }

  // --rate: when the next start may be; nullopt when now.
  std::optional<Clock::time_point> not_before() const {
    if (brakes_.rate <= 0 || Clock::now() >= next_start_) return std::nullopt;
    return next_start_;
  }
  // A start takes its turn: the next one is 1/rate later.
  void take_turn() {
    if (brakes_.rate <= 0) return;
    next_start_ = std::max(next_start_, Clock::now()) +
                  std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(1.0 / brakes_.rate));
  }

 private:
  const ReplayBrakes brakes_;
  ReplayResult& result_;
  const std::function<void(std::size_t, std::size_t)> on_progress_;
  Clock::time_point next_start_ = Clock::now();
};

}  // namespace pillbox
