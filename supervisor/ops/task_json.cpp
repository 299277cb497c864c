#include "supervisor/ops/task_json.h"

#include <algorithm>
#include <string>

#include "supervisor/store/quarantine_json.h"

namespace pillbox {

nlohmann::json task_json(const store::TaskRow& r, std::int64_t now_ms) {
  auto text_or_null = [](const std::string& s) { return s.empty() ? nlohmann::json(nullptr) : nlohmann::json(s); };
  nlohmann::json j{{"key", r.key},
                   {"handler", r.job},
                   {"state", to_string(r.view)},
                   {"attempts", r.attempts},
                   {"last_kind", text_or_null(r.last_kind)},
                   {"last_fingerprint", text_or_null(r.last_fingerprint)},
                   {"next_retry_at", r.next_retry_at != 0 ? nlohmann::json(iso_time(r.next_retry_at)) : nlohmann::json(nullptr)},
                   {"next_retry_in_ms", r.next_retry_at != 0 ? nlohmann::json(std::max<std::int64_t>(0, r.next_retry_at - now_ms))
                                                             : nlohmann::json(nullptr)},
                   {"quarantine_id", r.record_id != 0 ? nlohmann::json(r.record_id) : nlohmann::json(nullptr)},
                   {"claimed_by", text_or_null(r.claim)},
                   {"payload_sha256", r.payload_sha256},
                   {"payload_size", r.payload_size},
                   {"updated_at", iso_time(r.updated_at)}};
  // An ok task's result: made by a run, or by a replay of its record (perhaps of a patch).
  if (r.view == store::TaskView::kOk) {
    j["result_from"] = !r.result_origin.from_replay() ? "run" : r.result_origin.revision > 0 ? "patch" : "replay";
    if (r.result_origin.revision > 0) j["revision"] = r.result_origin.revision;
  }
  return j;
}

}  // namespace pillbox
