#include "supervisor/store/replay_verdict.h"

#include "shared/enum_text.h"

namespace pillbox::store {

std::string_view to_string(ReplayVerdict verdict) {
  switch (verdict) {
    case ReplayVerdict::kResolved: return "resolved";
    case ReplayVerdict::kFailedAgain: return "failed-again";
  }
  return "unknown";
}

std::optional<ReplayVerdict> replay_verdict_from_string(std::string_view text) {
  return enum_from_text(kAllReplayVerdicts, text);
}

RecordStatus status_after(ReplayVerdict verdict) {
  switch (verdict) {
    case ReplayVerdict::kResolved: return RecordStatus::kResolved;
    case ReplayVerdict::kFailedAgain: return RecordStatus::kFailedAgain;
  }
  return RecordStatus::kFailedAgain;
}

}  // namespace pillbox::store
