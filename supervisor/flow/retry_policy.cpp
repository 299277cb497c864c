#include "supervisor/flow/retry_policy.h"

#include <algorithm>

namespace pillbox {
namespace {

bool counted(const store::AttemptSummary& a) { return a.finished && a.charged; }

}  // namespace

bool is_transient(const RetrySettings& settings, const Outcome& outcome) {
  if (outcome.kind == Kind::kKilled || outcome.kind == Kind::kSandboxError || outcome.before_payload ||
      outcome.payload_unread) {
    return true;
  }
  return outcome.kind == Kind::kHandlerError && outcome.exit_code >= 0 &&
         settings.retry_exit_codes.count(outcome.exit_code) > 0;
}

bool counts_as_transient(const Outcome& outcome, std::uint32_t& slot_renewals) {
  constexpr std::uint32_t kFreeSlotRenewals = 3;
  return !(outcome.slot_renewed && slot_renewals++ < kFreeSlotRenewals);
}

Judgement judge(const RetrySettings& settings, const std::vector<store::AttemptSummary>& history,
                const Outcome& outcome, std::uint32_t transient_in_run) {
  if (outcome.kind == Kind::kOk) return {Decision::kDone, "ok"};
  const auto failures = static_cast<std::uint32_t>(std::count_if(history.begin(), history.end(), counted));
  const std::string kind = std::string(to_string(outcome.kind)) +
                           (outcome.before_payload   ? " before the payload was sent"
                            : outcome.payload_unread ? " without reading its payload"
                                                     : "");
  if (is_transient(settings, outcome)) {
    if (transient_in_run >= settings.max_attempts) {
      return {Decision::kGiveUp, kind + " on " + std::to_string(transient_in_run) +
                                     " attempts: not the payload's fault, not quarantined"};
    }
    return {Decision::kRetry, kind + ": not the payload's fault"};
  }
  if (is_deterministic(outcome.kind)) {
    // The counted attempt before this one (the last counted is this one).
    const store::AttemptSummary* previous = nullptr;
    bool seen_current = false;
    for (auto it = history.rbegin(); it != history.rend(); ++it) {
      if (!counted(*it)) continue;
      if (!seen_current) {
        seen_current = true;
        continue;
      }
      previous = &*it;
      break;
    }
    if (previous != nullptr && previous->fingerprint == outcome.fingerprint) {
      return {Decision::kQuarantine, kind + " " + outcome.fingerprint + " on two attempts in a row"};
    }
  }
  if (failures >= settings.max_attempts) {
    return {Decision::kQuarantine, "failed " + std::to_string(failures) + " of " +
                                       std::to_string(settings.max_attempts) + " attempts, last " + kind};
  }
  return {Decision::kRetry, kind};
}

namespace {

struct Losses {
  std::uint32_t with_evidence = 0;
  std::uint32_t with_evidence_solo = 0;
  std::uint32_t unexplained_solo = 0;
};

// The unfinished attempts at the end of the history, up to the last one that
// finished. Uncharged ones (a budget reset after a give-up) do not count.
Losses trailing_losses(const std::vector<store::AttemptSummary>& history) {
  Losses l;
  for (auto it = history.rbegin(); it != history.rend() && !it->finished; ++it) {
    if (!it->charged) continue;
    if (it->lost_with_evidence) {
      ++l.with_evidence;
      l.with_evidence_solo += it->solo ? 1 : 0;
    } else if (it->solo) {
      ++l.unexplained_solo;
    }
  }
  return l;
}

}  // namespace

bool kills_the_supervisor(const RetrySettings& settings, const std::vector<store::AttemptSummary>& history) {
  const Losses l = trailing_losses(history);
  return settings.max_attempts > 0 && l.with_evidence >= settings.max_attempts &&
         l.with_evidence_solo >= std::max<std::uint32_t>(1, settings.max_attempts - 1);
}

bool lost_without_evidence_too_often(const RetrySettings& settings, const std::vector<store::AttemptSummary>& history) {
  return settings.max_attempts > 0 && trailing_losses(history).unexplained_solo >= 2 * settings.max_attempts;
}

bool suspected_of_killing_the_supervisor(const std::vector<store::AttemptSummary>& history) {
  return !history.empty() && !history.back().finished;
}

std::chrono::milliseconds backoff_delay(const RetrySettings& settings, std::uint32_t failures, std::mt19937_64& rng) {
  const std::uint32_t doublings = failures > 0 ? failures - 1 : 0;
  const auto base = static_cast<std::uint64_t>(std::max<std::int64_t>(settings.backoff_base.count(), 0));
  const auto cap = static_cast<std::uint64_t>(std::max<std::int64_t>(settings.backoff_max.count(), 0));
  std::uint64_t ceiling = std::min(base, cap);
  // Stops at the cap, so it never overflows however many failures.
  for (std::uint32_t i = 0; i < doublings && ceiling < cap; ++i) ceiling = ceiling > cap / 2 ? cap : ceiling * 2;
  std::uniform_int_distribution<std::uint64_t> pick(0, ceiling);
  return std::chrono::milliseconds(static_cast<std::int64_t>(pick(rng)));
}

}  // namespace pillbox
