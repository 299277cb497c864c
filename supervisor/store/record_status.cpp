#include "supervisor/store/record_status.h"

#include "shared/enum_text.h"

namespace pillbox::store {

std::string_view to_string(RecordStatus status) {
  switch (status) {
    case RecordStatus::kQuarantined: return "quarantined";
    case RecordStatus::kAllowed: return "allowed";
    case RecordStatus::kReplaying: return "replaying";
    case RecordStatus::kResolved: return "resolved";
    case RecordStatus::kFailedAgain: return "failed-again";
    case RecordStatus::kDiscarded: return "discarded";
  }
  return "unknown";
}

bool is_open(RecordStatus status) {
  switch (status) {
    case RecordStatus::kQuarantined:
    case RecordStatus::kAllowed:
    case RecordStatus::kReplaying:
    case RecordStatus::kFailedAgain: return true;
    case RecordStatus::kResolved:
    case RecordStatus::kDiscarded: return false;
  }
  return true;
}

bool replayable(RecordStatus status, ReplayScope scope) {
  switch (scope) {
    case ReplayScope::kOpen:
      return status == RecordStatus::kQuarantined || status == RecordStatus::kFailedAgain ||
             status == RecordStatus::kAllowed;
    case ReplayScope::kAllowed: return status == RecordStatus::kAllowed;
    case ReplayScope::kAny: return true;
  }
  return false;
}

std::string not_replayable_words(ReplayScope scope) {
  if (scope == ReplayScope::kAllowed) {
    return "are not allowed to replay (--allowed takes only those `pillbox quarantine allow` allowed)";
  }
  return "are resolved, discarded or being replayed (--force replays them too)";
}

std::string not_replayable_why(RecordStatus status, ReplayScope scope, const std::string& id) {
  const std::string is = "is " + std::string(to_string(status));
  if (scope == ReplayScope::kAllowed) return is + ", not allowed (pillbox quarantine allow " + id + " allows it)";
  return is + " (--force replays it anyway)";
}

ReviewStep review_step(RecordStatus from, Review review) {
  ReviewStep step;
  if (from == RecordStatus::kReplaying) {
    step.refusal = "is being replayed right now; review it when the replay is over";
    return step;
  }
  if (review == Review::kRevoke) {
    step.to = RecordStatus::kQuarantined;
    step.already = from != RecordStatus::kAllowed;
    return step;
  }
  step.to = RecordStatus::kAllowed;
  switch (from) {
    case RecordStatus::kQuarantined:
    case RecordStatus::kFailedAgain: break;
    case RecordStatus::kAllowed: step.already = true; break;
    case RecordStatus::kResolved:
      step.refusal = "is resolved: a replay ran it ok; there is nothing to allow (replay --force runs it again)";
      break;
    case RecordStatus::kDiscarded:
      step.refusal =
          "is discarded: an operator handled it without a fix; there is nothing to allow (replay --force runs it anyway)";
      break;
    case RecordStatus::kReplaying: break;  // refused above
  }
  return step;
}

std::string_view review_action(Review review) {
  return review == Review::kAllow ? "allowed" : "allowance revoked";
}

std::optional<RecordStatus> record_status_from_string(std::string_view text) {
  return enum_from_text(kAllRecordStatuses, text);
}

}  // namespace pillbox::store
