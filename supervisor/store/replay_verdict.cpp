#include "supervisor/store/replay_verdict.h"

namespace pillbox::store {

std::string_view to_string(ReplayVerdict verdict) {
  switch (verdict) {
    case ReplayVerdict::kResolved: return "resolved";
    case ReplayVerdict::kFailedAgain: return "failed-again";
  }
  return "unknown";
}

std::optional<ReplayVerdict> replay_verdict_from_string(std::string_view text) {
  for (ReplayVerdict v : kAllReplayVerdicts) {
    if (to_string(v) == text) return v;
  }
  return std::nullopt;
}

RecordStatus status_after(ReplayVerdict verdict) {
  switch (verdict) {
    case ReplayVerdict::kResolved: return RecordStatus::kResolved;
    case ReplayVerdict::kFailedAgain: return RecordStatus::kFailedAgain;
  }
  return RecordStatus::kFailedAgain;
}

}  // namespace pillbox::store
