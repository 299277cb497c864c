#include "supervisor/store/quarantine_entry.h"

#include <nlohmann/json.hpp>

namespace pillbox {

store::QuarantineEntry make_quarantine_entry(const RunIdentity& id, const Outcome& o, const std::string& key,
                                             const std::string& payload_sha256, std::int64_t payload_size,
                                             const std::string& source) {
  store::QuarantineEntry e;
  e.key = key;
  e.source = source;
  e.handler = id.handler;
  e.handler_identity = id.handler_identity;
  e.handler_args = id.handler_args;
  e.exec_argv = id.exec_argv;
  e.working_dir = id.working_dir;
  e.policy_identity = id.policy_identity;
  e.policy = id.policy;
  e.payload_sha256 = payload_sha256;
  e.payload_size = payload_size;
  e.kind = std::string(to_string(o.kind));
  e.fingerprint = o.fingerprint;
  // Frames come from the child's memory: not necessarily UTF-8.
  e.crash_state = nlohmann::json(o.crash_state).dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
  e.message = o.message;
  e.signal = o.signal;
  e.syscall = o.syscall;
  e.exit_code = o.exit_code;
  e.cpu_ms = static_cast<std::int64_t>(o.cpu_ms);
  e.wall_ms = static_cast<std::int64_t>(o.wall_ms);
  e.max_rss_kb = static_cast<std::int64_t>(o.max_rss_kb);
  e.stderr_tail = o.stderr_tail;
  return e;
}

}  // namespace pillbox
