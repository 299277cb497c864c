#pragma once
// Execution: the raw facts the dispatcher gathered about one task; Outcome:
// the classification (docs/architecture.md, 'The path of one task').
#include <sys/types.h>

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "shared/control.h"
#include "shared/failure_kind.h"
#include "shared/fingerprint.h"
#include "shared/policy.h"
#include "shared/wire.h"

namespace pillbox {

struct Execution {
  bool exec_mode = false;
  Limits limits;
  std::string handler_identity;          // part of every fingerprint
  std::string task_key;                  // exec mode: what names the payload in its messages (payload_names.h)
  std::uint64_t payload_size = 0;        // the payload's bytes (ExitReport::payload_file_size says what the box wrote)
  std::optional<ExitReport> exit;        // absent when the child never ran
  std::string launch_error;              // fork failed, zygote lost
  std::uint64_t wall_ms = 0;
  bool killed_for_timeout = false;       // the supervisor hit the wall deadline
  bool killed_for_protocol = false;      // the supervisor killed it for a protocol violation
  std::optional<Frame> result;           // validated RESULT frame
  std::optional<std::string> setup_failure;  // SETUP_FAILED before the payload was sent
  std::string protocol_violation;        // first violation seen on the wire
  bool payload_delivered = false;
  bool cgroup_oom = false;               // the slot's OOM-kill counter moved
};

struct Outcome {
  Kind kind = Kind::kOk;
  int signal = 0;                        // terminating signal (0: none)
  int exit_code = -1;                    // exit code when it exited (-1: signaled or never ran)
  std::string syscall;                   // seccomp-violation: the denied syscall
  std::vector<std::string> crash_state;
  std::vector<SymbolizedFrame> frames;   // innermost first (crash kinds)
  std::string fingerprint;               // "" for ok
  std::string message;
  std::uint64_t cpu_ms = 0;
  std::uint64_t wall_ms = 0;
  std::uint64_t max_rss_kb = 0;
  std::string output;                    // the handler's result (ok only)
  std::string stderr_tail;               // exec mode, failures only: the last bytes of stderr (kStderrTailBytes)
  pid_t pid = 0;
  // The child failed before its payload was sent (a plugin's init crashed
  // or hung, something else of its uid killed it). Whatever the kind, never
  // charged to the payload (is_transient).
  bool before_payload = false;
  // The child could not empty what the slot's previous task left, so the
  // zygote made the slot anew. Not charged, and not counted as a transient
  // attempt either (TaskFlow::on_outcome): a previous task must cost nothing.
  bool slot_renewed = false;
  // Exec mode: the task failed without reading its payload, by the kernel's
  // word (ExitReport::payload_read), so its own setup failed (a missing
  // module, a wrong option). Never charged (is_transient); a run whose every
  // task fails so stops (TaskFlow).
  bool payload_unread = false;
};

// "SIGSEGV" for 11; "signal 99" for unknown numbers.
std::string signal_name(int sig);

}  // namespace pillbox
