#include "supervisor/classify/classifier.h"

#include <seccomp.h>
#include <signal.h>
#include <sys/wait.h>

#include <algorithm>
#include <cstdlib>
#include <cstring>

#include "shared/child_streams.h"
#include "shared/crash_report.h"
#include "supervisor/classify/exception_message.h"
#include "supervisor/classify/payload_names.h"
#include "supervisor/classify/traceback.h"

namespace pillbox {
namespace {

bool is_crash_signal(int sig) {
  return sig == SIGSEGV || sig == SIGBUS || sig == SIGILL || sig == SIGFPE || sig == SIGABRT || sig == SIGTRAP;
}

std::string syscall_name(long nr, std::uint32_t arch) {
  // The x32 ABI shares x86_64's AUDIT_ARCH and marks its numbers with bit 30.
  constexpr long kX32Bit = 0x40000000;
  if (arch == SCMP_ARCH_X86_64 && (nr & kX32Bit) != 0) {
    for (long n : {nr, nr & ~kX32Bit}) {
      if (char* name = seccomp_syscall_resolve_num_arch(SCMP_ARCH_X32, static_cast<int>(n))) {
        std::string out(name);
        std::free(name);
        return out + " (x32)";
      }
    }
  }
  char* name = seccomp_syscall_resolve_num_arch(arch != 0 ? arch : SCMP_ARCH_NATIVE, static_cast<int>(nr));
  if (name == nullptr) return "syscall " + std::to_string(nr);
  std::string out(name);
  std::free(name);
  // Another ABI's table (int 0x80 from a 64-bit program): say so, its
  // numbers are not the native ones.
  if (arch == SCMP_ARCH_X86 && seccomp_arch_native() != SCMP_ARCH_X86) out += " (i386)";
  return out;
}

// The crash report of the process that died, with the signal that killed it.
// Reports from descendants or with a lying signal are ignored.
std::optional<CrashReport> matching_report(const ExitReport& exit, int sig) {
  for (auto& r : parse_crash_reports(exit.crash)) {
    if (r.pid == exit.pid && r.signal == sig) return r;
  }
  return std::nullopt;
}

// What the task's own crash report claimed that the kernel contradicts
// (another signal than the one that ended it, or a denied syscall the
// listener never saw), as a note; "" when nothing.
std::string discarded_claims(const ExitReport& exit) {
  const int status = exit.wait_status;
  for (const auto& r : parse_crash_reports(exit.crash)) {
    if (r.pid != exit.pid) continue;  // a descendant's report: its own business
    if (!WIFSIGNALED(status) || r.signal != WTERMSIG(status)) {
      return "a crash report claiming " + signal_name(r.signal) + " was discarded: the process " +
             (WIFSIGNALED(status) ? "was killed by " + signal_name(WTERMSIG(status)) : "exited normally");
    }
    if (r.signal == SIGSYS && exit.seccomp_watched && r.syscall >= 0) {
      return "a crash report naming denied syscall " + syscall_name(r.syscall, r.arch) +
             " was discarded: the kernel reported none";
    }
  }
  return {};
}

// A broken wire protocol is the child's doing only once it had its payload;
// before, only pillbox's runtime ran in it: a sandbox failure.
Kind broken_wire(const Execution& ex) { return ex.payload_delivered ? Kind::kProtocolError : Kind::kSandboxError; }
std::string before_payload(const Execution& ex) {
  return ex.payload_delivered ? "" : " (before the payload was sent: not the payload's fault)";
}

std::string last_line(std::string_view text) {
  while (!text.empty() && (text.back() == '\n' || text.back() == '\r')) text.remove_suffix(1);
  const auto nl = text.rfind('\n');
  if (nl != std::string_view::npos) text.remove_prefix(nl + 1);
  return std::string(text.substr(0, 300));
}

// Extra temporary directories a message may name: the supervisor's own
// TMPDIR (a child's is /tmp, or cleared).
const std::vector<std::string>& extra_temp_dirs() {
  static const std::vector<std::string> dirs = [] {
    const char* tmpdir = std::getenv("TMPDIR");
    return tmpdir != nullptr && tmpdir[0] == '/' && tmpdir[1] != '\0' ? std::vector<std::string>{tmpdir}
                                                                       : std::vector<std::string>{};
  }();
  return dirs;
}

void fail(Outcome& o, Kind kind, std::string message) {
  o.kind = kind;
  o.message = std::move(message);
}

}  // namespace

std::string signal_name(int sig) {
  if (const char* abbrev = sigabbrev_np(sig)) return std::string("SIG") + abbrev;
  return "signal " + std::to_string(sig);
}

Outcome classify(const Execution& ex, Symbolizer& symbolizer) {
  Outcome o;
  // Set when stderr held an uncaught exception: its normalized message is
  // the fingerprint's detail.
  std::optional<std::string> traceback_detail;
  o.wall_ms = ex.wall_ms;
  const std::uint64_t cpu_limit_ms = (ex.limits.cpu_ms + 999) / 1000 * 1000;

  if (!ex.exit) {
    fail(o, Kind::kSandboxError, ex.launch_error.empty() ? "the child never started" : ex.launch_error);
  } else {
    const ExitReport& exit = *ex.exit;
    o.pid = static_cast<pid_t>(exit.pid);
    o.cpu_ms = (exit.utime_us + exit.stime_us) / 1000;
    o.max_rss_kb = exit.max_rss_kb;
    const int status = exit.wait_status;

    if (ex.setup_failure) {
      fail(o, Kind::kSandboxError, "sandbox setup failed: " + *ex.setup_failure);
    } else if (exit.violation_nr >= 0) {
      // The kernel's listener saw a denied syscall and the task was killed
      // for it: this wins whatever the ending looks like.
      if (WIFSIGNALED(status)) o.signal = WTERMSIG(status);
      o.syscall = syscall_name(exit.violation_nr, exit.violation_arch);
      fail(o, Kind::kSeccompViolation, "denied syscall " + o.syscall + " (reported by the kernel)");
    } else if (WIFSIGNALED(status)) {
      const int sig = WTERMSIG(status);
      o.signal = sig;
      if (sig == SIGKILL) {
        if (ex.killed_for_timeout && !ex.payload_delivered) {
          // It never asked for its payload, so the payload cannot be what hung it.
          fail(o, Kind::kSandboxError, "no HELLO from the child within the wall-clock limit of " +
                                            std::to_string(ex.limits.wall_ms) + " ms" +
                                            (ex.protocol_violation.empty() ? "" : ": " + ex.protocol_violation));
        } else if (ex.killed_for_timeout) {
          fail(o, Kind::kWallTimeout, "still running after the wall-clock limit of " + std::to_string(ex.limits.wall_ms) + " ms");
        } else if (ex.cgroup_oom) {
          fail(o, Kind::kOom, "killed by the cgroup OOM killer at the memory limit of " +
                                  std::to_string(ex.limits.memory_bytes >> 20) + " MiB");
        } else if (o.cpu_ms >= cpu_limit_ms) {
          fail(o, Kind::kCpuLimit, "killed at the hard CPU limit after " + std::to_string(o.cpu_ms) + " ms of CPU");
        } else if (ex.killed_for_protocol) {
          fail(o, broken_wire(ex), ex.protocol_violation + before_payload(ex));
        } else {
          fail(o, Kind::kKilled, "killed by SIGKILL from outside pillbox");
        }
      } else if (sig == SIGXCPU) {
        fail(o, Kind::kCpuLimit, "exceeded the CPU limit of " + std::to_string(cpu_limit_ms) + " ms (SIGXCPU)");
      } else if (sig == SIGXFSZ) {
        fail(o, Kind::kOutputLimit, "exceeded the file size limit of " + std::to_string(ex.limits.file_size_bytes) + " bytes (SIGXFSZ)");
      } else if (sig == SIGSYS && !exit.seccomp_watched) {
        // No listener (no seccomp notification, or a policy whose default
        // is kill): only the task's own report can name the syscall.
        const auto report = matching_report(exit, sig);
        if (report) o.frames = symbolizer.symbolize(report->frames);
        o.syscall = report && report->syscall >= 0 ? syscall_name(report->syscall, report->arch) : "unknown";
        fail(o, Kind::kSeccompViolation,
             "denied syscall " + o.syscall +
                 (report ? " (named by the task's own crash report: no kernel notification here)"
                         : " (no crash report: the process had no pillbox crash handler)"));
        o.crash_state = crash_state(o.frames);
      } else if (sig == SIGSYS || is_crash_signal(sig)) {
        // Under a listener a denied syscall never raises SIGSYS: a SIGSYS
        // the task raised itself is a crash like SIGABRT, and a syscall its
        // report names is a claim the kernel did not make.
        const auto report = matching_report(exit, sig);
        if (report) o.frames = symbolizer.symbolize(report->frames);
        if (report && sig != SIGSYS && (report->stack_fault || frames_recurse(o.frames))) {
          fail(o, Kind::kStackOverflow, "stack overflow (" + signal_name(sig) + ")");
        } else {
          fail(o, Kind::kCrash,
               "killed by " + signal_name(sig) +
                   (sig == SIGSYS ? " raised by the task itself (the kernel reported no denied syscall)"
                                  : report ? "" : " (no crash report)"));
        }
        o.crash_state = o.kind == Kind::kStackOverflow ? recursion_state(o.frames) : crash_state(o.frames);
      } else {
        fail(o, Kind::kKilled, "killed by " + signal_name(sig));
      }
    } else {
      const int code = WEXITSTATUS(status);
      o.exit_code = code;
      const std::size_t cap = ex.limits.output_bytes;
      if (!ex.protocol_violation.empty()) {
        fail(o, broken_wire(ex), ex.protocol_violation + before_payload(ex));
      } else if (!ex.payload_delivered) {
        // The payload never reached the child, so the sandbox failed (an
        // exec program runs only after its payload arrived).
        fail(o, Kind::kSandboxError, "the child exited with code " + std::to_string(code) +
                                         " before asking for its payload (not the payload's fault)");
      } else if (ex.exec_mode) {
        if (ex.result) {
          // execve failed (EAGAIN at the process limit, a missing
          // interpreter): the host's problem, not the payload's.
          fail(o, Kind::kSandboxError, "cannot run the program: " + ex.result->message);
        } else if (exit.stdout_size > cap) {
          fail(o, Kind::kOutputLimit, "wrote " + std::to_string(exit.stdout_size) + " bytes to stdout, over the cap of " + std::to_string(cap));
        } else if (code != 0) {
          // An interpreter's uncaught exception gives a script its crash state.
          if (auto traceback = parse_traceback(exit.stderr_tail)) {
            mask_payload_frames(*traceback, ex.task_key);
            o.crash_state = traceback_state(*traceback);
            traceback_detail =
                exception_message_key(mask_payload_names(traceback->message, ex.task_key), extra_temp_dirs());
            fail(o, Kind::kHandlerError, "exit code " + std::to_string(code) + ": " + traceback->exception_type +
                                             (traceback->message.empty() ? "" : ": " + traceback->message));
          } else {
            const std::string err = last_line(exit.stderr_tail);
            fail(o, Kind::kHandlerError, "exit code " + std::to_string(code) + (err.empty() ? "" : ": " + err));
          }
        } else {
          o.output = exit.stdout_data;
        }
      } else if (!ex.result) {
        fail(o, Kind::kProtocolError, "the child exited with code " + std::to_string(code) + " without sending a result");
      } else {
        const Frame& r = *ex.result;
        switch (r.status) {
          case ResultStatus::kOk:
            if (r.data.size() > cap) fail(o, Kind::kOutputLimit, "result of " + std::to_string(r.data.size()) + " bytes over the cap of " + std::to_string(cap));
            else o.output = r.data;
            break;
          case ResultStatus::kHandlerError: fail(o, Kind::kHandlerError, r.message); break;
          case ResultStatus::kOutputLimit: fail(o, Kind::kOutputLimit, r.message); break;
          case ResultStatus::kOutOfMemory: fail(o, Kind::kOom, r.message); break;
          case ResultStatus::kExecFailed: fail(o, Kind::kProtocolError, "exec failure from an in-process handler"); break;
        }
      }
    }
  }

  // The cgroup's OOM-kill counter covers the whole task tree and is the
  // kernel's word: any failure after the OOM killer took one of the task's
  // processes (a shell exits 137, a parent reports its worker gone) is oom.
  // Except a sandbox error (never the payload's) and a wall timeout (the
  // supervisor killed it itself).
  if (ex.cgroup_oom && o.kind != Kind::kOk && o.kind != Kind::kOom && o.kind != Kind::kSandboxError &&
      o.kind != Kind::kWallTimeout) {
    const std::string then = o.message;
    fail(o, Kind::kOom, "a process of the task was killed by the cgroup OOM killer at the memory limit of " +
                            std::to_string(ex.limits.memory_bytes >> 20) + " MiB (then: " + then + ")");
    o.crash_state.clear();
    o.frames.clear();
    o.syscall.clear();
  }

  if (ex.exit) {
    if (const std::string note = discarded_claims(*ex.exit); !note.empty()) {
      o.message += (o.message.empty() ? "" : " ") + std::string("[") + note + "]";
    }
  }

  // Until its TASK frame is sent, nothing of the payload exists in the
  // child. The kind stays (a plugin whose init crashes is still a crash);
  // only the verdict spares the payload (is_transient).
  o.before_payload = ex.exit.has_value() && !ex.payload_delivered && o.kind != Kind::kOk;
  // The payload never reached it, whether or not SETUP_FAILED was read
  // before the exit report (a race the attack review found: the kind then
  // comes from the exit code alone).
  o.slot_renewed = o.before_payload && ex.exit->slot_renewed;
  // Outcome::payload_unread (issue 26, point 4). Not for an empty payload
  // (an mmap of it fails), nor when the file is not all of the payload (the
  // child died writing it).
  o.payload_unread = ex.exit.has_value() && ex.payload_delivered && o.kind != Kind::kOk &&
                     ex.exit->payload_read == 0 && ex.payload_size > 0 &&
                     ex.exit->payload_file_size == ex.payload_size;

  if (o.kind != Kind::kOk) {
    // Only failures pay for the copy.
    if (ex.exit) {
      const std::string_view tail = ex.exit->stderr_tail;
      o.stderr_tail = tail.substr(tail.size() - std::min(tail.size(), kStderrTailBytes));
    }
    std::string detail;
    switch (o.kind) {
      case Kind::kCrash:
      case Kind::kStackOverflow:
      case Kind::kKilled: detail = signal_name(o.signal); break;
      case Kind::kSeccompViolation: detail = o.syscall; break;
      case Kind::kHandlerError:
        detail = traceback_detail ? *traceback_detail
                                  : normalize_message(ex.exec_mode ? mask_payload_names(o.message, ex.task_key) : o.message);
        break;
      case Kind::kProtocolError:
      case Kind::kSandboxError: detail = normalize_message(o.message); break;
      case Kind::kCpuLimit:
      case Kind::kWallTimeout:
      case Kind::kOom:
      case Kind::kOutputLimit:
      case Kind::kSupervisorLost:
      case Kind::kOk: break;  // the handler is the identity (no usable stack at the kill)
    }
    o.fingerprint = make_fingerprint(o.kind, detail, o.crash_state, ex.handler_identity);
  }
  return o;
}

}  // namespace pillbox
