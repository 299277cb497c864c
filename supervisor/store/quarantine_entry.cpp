#include "supervisor/store/quarantine_entry.h"

#include "supervisor/classify/outcome_json.h"

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
  static_cast<OutcomeRecord&>(e) = outcome_record(o);
  // Frames may not be UTF-8: round-trip them as the store keeps them, so a
  // record reads the same fresh or from the store.
  e.crash_state = crash_state_of_text(crash_state_text(o.crash_state));
  e.stderr_tail = o.stderr_tail;
  return e;
}

}  // namespace pillbox
