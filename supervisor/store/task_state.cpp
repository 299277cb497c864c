#include "supervisor/store/task_state.h"

#include "shared/enum_text.h"

namespace pillbox::store {

std::string_view to_string(TaskState state) {
  switch (state) {
    case TaskState::kPending: return "pending";
    case TaskState::kOk: return "ok";
    case TaskState::kQuarantined: return "quarantined";
    case TaskState::kGaveUp: return "gave-up";
  }
  return "unknown";
}

std::optional<TaskState> task_state_from_string(std::string_view text) {
  return enum_from_text(kAllTaskStates, text);
}

}  // namespace pillbox::store
