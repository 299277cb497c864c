#pragma once
// Filter values from text, the CLI's options and the console's query
// parameters alike: the same words taken, the same errors (kUsage) said.
#include <string>

#include "shared/status.h"
#include "supervisor/store/record_status.h"
#include "supervisor/store/task_view.h"

namespace pillbox {

inline Expected<store::RecordStatus> record_status_filter(const std::string& text) {
  if (auto status = store::record_status_from_string(text)) return *status;
  std::string words;
  for (store::RecordStatus s : store::kAllRecordStatuses) words += (words.empty() ? "" : ", ") + std::string(to_string(s));
  return Error::usage("unknown status '" + text + "' (" + words + ")");
}

inline Expected<std::string> record_source_filter(const std::string& text) {
  if (text == "run" || text == "fuzz" || text == "import") return text;
  return Error::usage("unknown source '" + text + "' (run, fuzz, import)");
}

inline Expected<store::TaskView> task_state_filter(const std::string& text) {
  if (auto view = store::task_view_from_string(text)) return *view;
  return Error::usage("unknown state '" + text + "' (pending, retrying, held, gave-up, ok, quarantined)");
}

}  // namespace pillbox
