#pragma once
// The status of a quarantine record: the closed set the schema's CHECK
// allows. Text only in SQL, JSON and on the command line.
#include <cstdint>
#include <optional>
#include <string_view>

namespace pillbox::store {

enum class RecordStatus : std::uint8_t {
  kQuarantined,  // on file, waiting for a fix (every record starts here)
  kReplaying,    // claimed by a running `quarantine replay`
  kResolved,     // ran ok in a replay
  kFailedAgain,  // failed again in a replay
  kDiscarded,    // handled without a fix (an operator, or taken back by a run)
};

inline constexpr RecordStatus kAllRecordStatuses[] = {
    RecordStatus::kQuarantined, RecordStatus::kReplaying, RecordStatus::kResolved, RecordStatus::kFailedAgain,
    RecordStatus::kDiscarded,
};

// Still waiting for someone (quarantined, replaying, failed-again): not yet
// resolved or discarded. Purging one loses evidence nobody has looked at.
bool is_open(RecordStatus status);

// What a replay takes: quarantined and failed-again records, and with
// --force any other (the caller refuses one another replay holds).
inline bool replayable(RecordStatus status, bool force) {
  return status == RecordStatus::kQuarantined || status == RecordStatus::kFailedAgain || force;
}

std::string_view to_string(RecordStatus status);
std::optional<RecordStatus> record_status_from_string(std::string_view text);

}  // namespace pillbox::store
