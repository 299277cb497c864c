#include "supervisor/classify/outcome_json.h"

namespace pillbox {

OutcomeFields outcome_fields(const Outcome& o) {
  OutcomeFields f;
  f.kind = to_string(o.kind);
  if (!o.fingerprint.empty()) f.fingerprint = o.fingerprint;
  f.crash_state = o.crash_state;
  f.message = o.message;
  f.signal = o.signal;
  f.syscall = o.syscall;
  f.exit_code = o.exit_code;
  f.cpu_ms = static_cast<std::int64_t>(o.cpu_ms);
  f.wall_ms = static_cast<std::int64_t>(o.wall_ms);
  f.max_rss_kb = static_cast<std::int64_t>(o.max_rss_kb);
  return f;
}

void put_outcome_fields(const OutcomeFields& f, nlohmann::json& j) {
  using nlohmann::json;
  j["kind"] = f.kind;
  j["fingerprint"] = f.fingerprint ? json(*f.fingerprint) : json(nullptr);
  j["crash_state"] = f.crash_state;
  j["message"] = f.message;
  j["signal"] = f.signal != 0 ? json(signal_name(f.signal)) : json(nullptr);
  j["syscall"] = f.syscall.empty() ? json(nullptr) : json(f.syscall);
  j["exit_code"] = f.exit_code >= 0 ? json(f.exit_code) : json(nullptr);
  j["cpu_ms"] = f.cpu_ms;
  j["wall_ms"] = f.wall_ms;
  j["max_rss_kb"] = f.max_rss_kb;
}

}  // namespace pillbox
