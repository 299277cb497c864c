#include "supervisor/store/record_status.h"

#include "shared/enum_text.h"

namespace pillbox::store {

std::string_view to_string(RecordStatus status) {
  switch (status) {
    case RecordStatus::kQuarantined: return "quarantined";
    case RecordStatus::kReplaying: return "replaying";
    case RecordStatus::kResolved: return "resolved";
    case RecordStatus::kFailedAgain: return "failed-again";
    case RecordStatus::kDiscarded: return "discarded";
  }
  return "unknown";
}

bool is_open(RecordStatus status) {
  return status == RecordStatus::kQuarantined || status == RecordStatus::kReplaying ||
         status == RecordStatus::kFailedAgain;
}

std::optional<RecordStatus> record_status_from_string(std::string_view text) {
  return enum_from_text(kAllRecordStatuses, text);
}

}  // namespace pillbox::store
