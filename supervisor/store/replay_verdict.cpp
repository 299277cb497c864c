#include "supervisor/store/replay_verdict.h"

namespace pillbox::store {

std::string_view to_string(ReplayVerdict verdict) {
  switch (verdict) {
    case ReplayVerdict::kResolved: return "resolved";
    case ReplayVerdict::kFailedAgain: return "failed-again";
  }
  return "unknown";
}

RecordStatus status_after(ReplayVerdict verdict) {
  switch (verdict) {
    case ReplayVerdict::kResolved: return RecordStatus::kResolved;
    case ReplayVerdict::kFailedAgain: return RecordStatus::kFailedAgain;
  }
  return RecordStatus::kFailedAgain;
}

}  // namespace pillbox::store
