#pragma once
// The state of a task in the ledger: the closed set the schema's CHECK
// allows. Text only in SQL and in what people read.
#include <cstdint>
#include <optional>
#include <string_view>

namespace pillbox::store {

enum class TaskState : std::uint8_t {
  kPending,      // not finished: runs (again) when its input comes again
  kOk,           // done: a run over the same input skips it
  kQuarantined,  // poison, with a quarantine record: skipped too
  kGaveUp,       // out of attempts for reasons not the payload's own: a later run tries again, afresh
};

inline constexpr TaskState kAllTaskStates[] = {
    TaskState::kPending, TaskState::kOk, TaskState::kQuarantined, TaskState::kGaveUp,
};

std::string_view to_string(TaskState state);
std::optional<TaskState> task_state_from_string(std::string_view text);

}  // namespace pillbox::store
