#pragma once
// What one replayed record came to (pillbox quarantine replay): the status
// the record takes, and the word the replay's output uses for it.
#include <cstdint>
#include <string_view>

#include "supervisor/store/record_status.h"

namespace pillbox::store {

enum class ReplayVerdict : std::uint8_t {
  kResolved,     // ran ok: the fix works for this payload
  kFailedAgain,  // failed again (its attempt is appended to the task's history)
};

inline constexpr ReplayVerdict kAllReplayVerdicts[] = {ReplayVerdict::kResolved, ReplayVerdict::kFailedAgain};

std::string_view to_string(ReplayVerdict verdict);

// The record's status after a replay with this verdict.
RecordStatus status_after(ReplayVerdict verdict);

}  // namespace pillbox::store
