#include "supervisor/ops/record_discard.h"

namespace pillbox {

Status check_discardable(const store::QuarantineRecord& record, const std::string& id_text) {
  if (record.status == store::RecordStatus::kReplaying) {
    return Status::error("record " + id_text + " is being replayed right now; discard it when the replay is over",
                         ErrorCode::kUsage);
  }
  return Status::ok();
}

Expected<DiscardOutcome> discard_record(store::QuarantineStore& quarantine, const store::QuarantineRecord& record,
                                        const std::string& actor, const std::string& reason) {
  if (record.status == store::RecordStatus::kDiscarded) return DiscardOutcome::kAlreadyDiscarded;
  const std::string was(to_string(record.status));
  if (auto s = quarantine.set_status(record.id, store::RecordStatus::kDiscarded, store::now_ms(), actor, "discarded",
                                     reason + " (was " + was + ")");
      !s) {
    return Error{s.message(), s.code()};
  }
  return DiscardOutcome::kDiscarded;
}

}  // namespace pillbox
