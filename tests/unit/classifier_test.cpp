#include "supervisor/classify/classifier.h"

#include <dlfcn.h>
#include <link.h>
#include <signal.h>
#include <sys/wait.h>

#include <doctest/doctest.h>

#include <cstdint>
#include <string>
#include <vector>

// Crash sites for the fingerprint tests: real functions of this test binary,
// kept out of line so the symbolizer finds them in .symtab.
namespace pbclassifytest {
__attribute__((noinline)) int parse_header_bug(int n) {
  volatile int acc = 0;
  for (int i = 0; i < n; ++i) acc = acc + i * 7;
  return acc;
}
__attribute__((noinline)) int inflate_block_bug(int n) {
  volatile int acc = 3;
  for (int i = 0; i < n; ++i) acc = acc * 11 + i;
  return acc;
}
__attribute__((noinline)) int caller_of_bugs(int n) {
  volatile int acc = parse_header_bug(n);
  acc = acc + inflate_block_bug(n);
  for (int i = 0; i < n; ++i) acc = acc ^ i;
  return acc;
}
}  // namespace pbclassifytest

namespace pillbox {
namespace {

constexpr std::int64_t kPid = 4242;

bool contains(const std::string& haystack, std::string_view needle) {
  return haystack.find(needle) != std::string::npos;
}

struct Location {
  std::string module;
  std::uint64_t offset = 0;
};

// What the crash capture in a child records for `address`: the ELF object's
// path and the address minus its load bias.
Location locate(const void* address) {
  struct Search {
    std::uintptr_t address;
    Location found;
    bool hit = false;
  } search{reinterpret_cast<std::uintptr_t>(address), {}, false};
  dl_iterate_phdr(
      [](dl_phdr_info* object, std::size_t, void* data) {
        auto* s = static_cast<Search*>(data);
        for (int i = 0; i < object->dlpi_phnum; ++i) {
          const ElfW(Phdr)& ph = object->dlpi_phdr[i];
          const std::uintptr_t start = object->dlpi_addr + ph.p_vaddr;
          if (ph.p_type == PT_LOAD && s->address >= start && s->address < start + ph.p_memsz) {
            const bool main_program = object->dlpi_name == nullptr || object->dlpi_name[0] == '\0';
            s->found.module = main_program ? "/proc/self/exe" : object->dlpi_name;
            s->found.offset = s->address - object->dlpi_addr;
            s->hit = true;
            return 1;
          }
        }
        return 0;
      },
      &search);
  REQUIRE(search.hit);
  return search.found;
}

std::string frame_line(const void* fn, std::uint64_t delta) {
  const Location loc = locate(fn);
  char hex[32];
  std::snprintf(hex, sizeof hex, "0x%llx", static_cast<unsigned long long>(loc.offset + delta));
  return "frame " + loc.module + " " + hex + "\n";
}

std::string report(std::int64_t pid, int sig, const std::string& extra_lines) {
  return "pillbox-crash 1\npid " + std::to_string(pid) + "\nsignal " + std::to_string(sig) +
         "\ncode 1\naddr 0x0\npc 0x1000\nsp 0x7ffd0000\n" + extra_lines + "end\n";
}

Execution base() {
  Execution ex;
  ex.handler_identity = "regex pattern=a+";
  ex.payload_delivered = true;
  ex.wall_ms = 12;
  ExitReport exit;
  exit.seq = 1;
  exit.pid = kPid;
  exit.utime_us = 3000;
  exit.stime_us = 1000;
  exit.max_rss_kb = 2048;
  ex.exit = exit;
  return ex;
}

Execution signaled(int sig) {
  Execution ex = base();
  ex.exit->wait_status = sig;  // W_EXITCODE(0, sig): killed by `sig`, no core
  return ex;
}

Execution exited(int code) {
  Execution ex = base();
  ex.exit->wait_status = W_EXITCODE(code, 0);
  return ex;
}

Frame result(ResultStatus status, std::string data, std::string message) {
  Frame f;
  f.type = FrameType::kResult;
  f.status = status;
  f.data = std::move(data);
  f.message = std::move(message);
  return f;
}

Outcome run(const Execution& ex) {
  Symbolizer symbolizer;
  return classify(ex, symbolizer);
}

void check_fingerprint_shape(const Outcome& o) {
  REQUIRE(o.fingerprint.size() == 4 + 16);
  CHECK(o.fingerprint.rfind("pb1-", 0) == 0);
  CHECK(o.fingerprint.find_first_not_of("0123456789abcdef", 4) == std::string::npos);
}

TEST_CASE("classifier: wait statuses are built the way the kernel builds them") {
  CHECK(WIFSIGNALED(signaled(SIGSEGV).exit->wait_status));
  CHECK(WTERMSIG(signaled(SIGSEGV).exit->wait_status) == SIGSEGV);
  CHECK(WIFEXITED(exited(3).exit->wait_status));
  CHECK(WEXITSTATUS(exited(3).exit->wait_status) == 3);
}

TEST_CASE("classifier: SIGKILL rules, in order") {
  SUBCASE("wall timeout after the payload was delivered") {
    Execution ex = signaled(SIGKILL);
    ex.killed_for_timeout = true;
    ex.cgroup_oom = true;  // the timeout wins: the supervisor knows it killed it
    const Outcome o = run(ex);
    CHECK(o.kind == Kind::kWallTimeout);
    CHECK(o.message == "still running after the wall-clock limit of 10000 ms");
    CHECK(o.signal == SIGKILL);
    CHECK(o.exit_code == -1);
    check_fingerprint_shape(o);
  }
  SUBCASE("wall timeout before the payload: the child never said HELLO (the sandbox's failure, not the payload's)") {
    Execution ex = signaled(SIGKILL);
    ex.killed_for_timeout = true;
    ex.payload_delivered = false;
    const Outcome o = run(ex);
    CHECK(o.kind == Kind::kSandboxError);
    CHECK(o.message == "no HELLO from the child within the wall-clock limit of 10000 ms");
  }
  SUBCASE("cgroup OOM") {
    Execution ex = signaled(SIGKILL);
    ex.cgroup_oom = true;
    ex.exit->utime_us = 60'000'000;  // also over the CPU limit: OOM is checked first
    const Outcome o = run(ex);
    CHECK(o.kind == Kind::kOom);
    CHECK(o.message == "killed by the cgroup OOM killer at the memory limit of 512 MiB");
  }
  SUBCASE("cgroup OOM of another process of the task: the task's failure is oom, whatever it looked like") {
    for (Execution ex : {exited(137), exited(1), signaled(SIGSEGV), signaled(SIGKILL)}) {
      ex.exec_mode = true;
      ex.cgroup_oom = true;
      ex.exit->stderr_tail = "worker died\n";
      const Outcome o = run(ex);
      CHECK(o.kind == Kind::kOom);
      const bool named = o.message.find("killed by the cgroup OOM killer at the memory limit of 512 MiB") != std::string::npos;
      CHECK_MESSAGE(named, o.message);
      CHECK(o.crash_state.empty());
      check_fingerprint_shape(o);
    }
    Execution survived = exited(0);  // it coped with the loss: its result stands
    survived.exec_mode = true;
    survived.cgroup_oom = true;
    CHECK(run(survived).kind == Kind::kOk);
    Execution setup = exited(3);
    setup.cgroup_oom = true;
    setup.setup_failure = "cannot join cgroup";
    CHECK(run(setup).kind == Kind::kSandboxError);
    // One fingerprint for the handler, whatever the task's own ending said.
    Execution a = exited(137), b = exited(1);
    a.exec_mode = b.exec_mode = true;
    a.cgroup_oom = b.cgroup_oom = true;
    CHECK(run(a).fingerprint == run(b).fingerprint);
  }
  SUBCASE("CPU time at the hard limit") {
    Execution ex = signaled(SIGKILL);
    ex.limits.cpu_ms = 1000;
    ex.exit->utime_us = 900'000;
    ex.exit->stime_us = 100'000;
    const Outcome o = run(ex);
    CHECK(o.kind == Kind::kCpuLimit);
    CHECK(o.cpu_ms == 1000);
    CHECK(o.message == "killed at the hard CPU limit after 1000 ms of CPU");
  }
  SUBCASE("CPU limits round up to whole seconds") {
    Execution ex = signaled(SIGKILL);
    ex.limits.cpu_ms = 1500;  // RLIMIT_CPU is 2 s
    ex.exit->utime_us = 1'600'000;
    ex.exit->stime_us = 0;
    CHECK(run(ex).kind == Kind::kKilled);
    ex.exit->utime_us = 2'000'000;
    CHECK(run(ex).kind == Kind::kCpuLimit);
  }
  SUBCASE("killed for a protocol violation") {
    Execution ex = signaled(SIGKILL);
    ex.killed_for_protocol = true;
    ex.protocol_violation = "frame of 99999999 bytes exceeds the cap of 16842752";
    const Outcome o = run(ex);
    CHECK(o.kind == Kind::kProtocolError);
    CHECK(o.message == ex.protocol_violation);
  }
  SUBCASE("plain SIGKILL from outside") {
    const Outcome o = run(signaled(SIGKILL));
    CHECK(o.kind == Kind::kKilled);
    CHECK(o.message == "killed by SIGKILL from outside pillbox");
    CHECK(o.signal == SIGKILL);
    check_fingerprint_shape(o);
  }
}

TEST_CASE("classifier: a slot made anew for the task is said so, whichever came first, its frame or its exit") {
  // The zygote renewed the slot after a child that could not empty it
  // (exit 120, sandbox/exit_codes.h). The supervisor may read the child's
  // SETUP_FAILED frame before the exit report, or not (broke: then the
  // renewal went unsaid, and the attempt counted).
  for (const bool frame_read : {true, false}) {
    CAPTURE(frame_read);
    Execution ex = exited(120);
    ex.payload_delivered = false;
    ex.exit->slot_renewed = true;
    if (frame_read) ex.setup_failure = "private tmp: cannot remove /tmp/x, left by the slot's previous task";
    const Outcome o = run(ex);
    CHECK(o.kind == Kind::kSandboxError);
    CHECK(o.before_payload);
    CHECK(o.slot_renewed);
  }
  // A payload that exits 120 itself renews its own slot (the zygote cannot
  // tell), but nothing is forgiven: it had its payload.
  Execution ex = exited(120);
  ex.exec_mode = true;
  ex.exit->slot_renewed = true;
  const Outcome o = run(ex);
  CHECK_FALSE(o.slot_renewed);
  CHECK_FALSE(o.before_payload);
}

TEST_CASE("classifier: resource signals") {
  const Outcome xcpu = run(signaled(SIGXCPU));
  CHECK(xcpu.kind == Kind::kCpuLimit);
  CHECK(xcpu.signal == SIGXCPU);
  CHECK(xcpu.message == "exceeded the CPU limit of 5000 ms (SIGXCPU)");

  const Outcome xfsz = run(signaled(SIGXFSZ));
  CHECK(xfsz.kind == Kind::kOutputLimit);
  CHECK(xfsz.message == "exceeded the file size limit of 67108864 bytes (SIGXFSZ)");

  const Outcome term = run(signaled(SIGTERM));
  CHECK(term.kind == Kind::kKilled);
  CHECK(term.message == "killed by SIGTERM");
  CHECK(term.signal == SIGTERM);
}

TEST_CASE("classifier: the kernel names the syscall of a violation") {
  SUBCASE("a notification from the listener is the verdict, whatever killed the task") {
    for (Execution ex : {signaled(SIGKILL), signaled(SIGSEGV), exited(0)}) {
      ex.exit->seccomp_watched = true;
      ex.exit->violation_nr = 41;
      ex.exit->violation_arch = 0;
      const Outcome o = run(ex);
      CHECK(o.kind == Kind::kSeccompViolation);
      CHECK(o.syscall == "socket");
      CHECK(o.message == "denied syscall socket (reported by the kernel)");
      check_fingerprint_shape(o);
    }
  }
  SUBCASE("under a listener, a SIGSYS the task raised itself is a crash; its forged report is discarded") {
    Execution ex = signaled(SIGSYS);
    ex.exit->seccomp_watched = true;
    ex.exit->crash = report(kPid, SIGSYS, "syscall 169\narch 0\n");  // reboot
    const Outcome o = run(ex);
    CHECK(o.kind == Kind::kCrash);
    CHECK(o.syscall.empty());
    CHECK(contains(o.message, "killed by SIGSYS raised by the task itself"));
    CHECK(contains(o.message, "[a crash report naming denied syscall reboot was discarded: the kernel reported none]"));
  }
  SUBCASE("a report that contradicts the wait status is discarded, and said so") {
    Execution ex = exited(0);
    ex.exit->crash = report(kPid, SIGSEGV, "stack_fault 0\n");
    CHECK(contains(run(ex).message, "a crash report claiming SIGSEGV was discarded: the process exited normally"));
    Execution killed = signaled(SIGABRT);
    killed.exit->crash = report(kPid, SIGSEGV, "stack_fault 0\n");
    const Outcome k = run(killed);
    CHECK(k.kind == Kind::kCrash);
    CHECK(k.frames.empty());
    CHECK(contains(k.message, "a crash report claiming SIGSEGV was discarded: the process was killed by SIGABRT"));
    Execution descendant = exited(0);  // a child process's report is its own business
    descendant.exit->crash = report(kPid + 7, SIGSEGV, "stack_fault 0\n");
    CHECK_FALSE(contains(run(descendant).message, "discarded"));
  }
}

TEST_CASE("classifier: without a listener, seccomp violations are named by the task's report") {
  SUBCASE("with a crash report of the same pid") {
    Execution ex = signaled(SIGSYS);
    ex.exit->crash = report(kPid, SIGSYS, "syscall 41\narch 0\n");
    const Outcome o = run(ex);
    CHECK(o.kind == Kind::kSeccompViolation);
    CHECK(o.syscall == "socket");
    CHECK(o.signal == SIGSYS);
    CHECK(o.message == "denied syscall socket (named by the task's own crash report: no kernel notification here)");
    check_fingerprint_shape(o);

    Execution execve = signaled(SIGSYS);
    execve.exit->crash = report(kPid, SIGSYS, "syscall 59\narch 0\n");
    const Outcome e = run(execve);
    CHECK(e.syscall == "execve");
    CHECK(e.fingerprint != o.fingerprint);
  }
  SUBCASE("without a report") {
    const Outcome o = run(signaled(SIGSYS));
    CHECK(o.kind == Kind::kSeccompViolation);
    CHECK(o.syscall == "unknown");
    CHECK(contains(o.message, "denied syscall unknown (no crash report"));
  }
  SUBCASE("a report from another pid is not believed") {
    Execution ex = signaled(SIGSYS);
    ex.exit->crash = report(kPid + 1, SIGSYS, "syscall 41\narch 0\n");
    const Outcome o = run(ex);
    CHECK(o.kind == Kind::kSeccompViolation);
    CHECK(o.syscall == "unknown");
  }
}

TEST_CASE("classifier: crashes") {
  const std::string frames = frame_line(reinterpret_cast<const void*>(&pbclassifytest::parse_header_bug), 4) +
                             frame_line(reinterpret_cast<const void*>(&pbclassifytest::caller_of_bugs), 8);
  SUBCASE("SIGSEGV with a report: frames are symbolized") {
    Execution ex = signaled(SIGSEGV);
    ex.exit->crash = report(kPid, SIGSEGV, "stack_fault 0\n" + frames);
    const Outcome o = run(ex);
    CHECK(o.kind == Kind::kCrash);
    CHECK(o.message == "killed by SIGSEGV");
    REQUIRE(o.frames.size() == 2);
    CHECK(o.frames[0].function == "pbclassifytest::parse_header_bug(int)");
    CHECK(o.frames[1].function == "pbclassifytest::caller_of_bugs(int)");
    CHECK(o.crash_state ==
          std::vector<std::string>{"pbclassifytest::parse_header_bug", "pbclassifytest::caller_of_bugs"});
    CHECK(o.pid == kPid);
  }
  SUBCASE("a stack fault makes it a stack overflow") {
    Execution ex = signaled(SIGSEGV);
    ex.exit->crash = report(kPid, SIGSEGV, "stack_fault 1\n" + frames);
    const Outcome o = run(ex);
    CHECK(o.kind == Kind::kStackOverflow);
    CHECK(o.message == "stack overflow (SIGSEGV)");
    CHECK(o.signal == SIGSEGV);
  }
  SUBCASE("a full report of recursing frames makes it a stack overflow") {
    std::string many;
    for (std::size_t i = 0; i < kMaxCrashFrames; ++i) {
      many += frame_line(reinterpret_cast<const void*>(&pbclassifytest::parse_header_bug), i == 0 ? 4 : 8);
    }
    Execution ex = signaled(SIGSEGV);
    ex.exit->crash = report(kPid, SIGSEGV, many);
    CHECK(run(ex).kind == Kind::kStackOverflow);
  }
  SUBCASE("a few recursing frames are a crash inside a recursion") {
    std::string few;
    for (int i = 0; i < 20; ++i) {
      few += frame_line(reinterpret_cast<const void*>(&pbclassifytest::parse_header_bug), i == 0 ? 4 : 8);
    }
    Execution ex = signaled(SIGSEGV);
    ex.exit->crash = report(kPid, SIGSEGV, few);
    CHECK(run(ex).kind == Kind::kCrash);
  }
  SUBCASE("a report from another pid is ignored") {
    Execution ex = signaled(SIGSEGV);
    ex.exit->crash = report(kPid + 1, SIGSEGV, "stack_fault 1\n" + frames);
    const Outcome o = run(ex);
    CHECK(o.kind == Kind::kCrash);
    CHECK(o.frames.empty());
    CHECK(o.crash_state.empty());
    CHECK(o.message == "killed by SIGSEGV (no crash report)");
  }
  SUBCASE("a report with a lying signal is ignored") {
    Execution ex = signaled(SIGSEGV);
    ex.exit->crash = report(kPid, SIGBUS, frames);
    const Outcome o = run(ex);
    CHECK(o.kind == Kind::kCrash);
    CHECK(o.frames.empty());
  }
  SUBCASE("every crash signal") {
    for (int sig : {SIGSEGV, SIGBUS, SIGILL, SIGFPE, SIGABRT, SIGTRAP}) {
      CAPTURE(sig);
      const Outcome o = run(signaled(sig));
      CHECK(o.kind == Kind::kCrash);
      CHECK(o.signal == sig);
      CHECK(o.message == "killed by " + signal_name(sig) + " (no crash report)");
    }
  }
}

TEST_CASE("classifier: in-process results") {
  SUBCASE("ok") {
    Execution ex = exited(0);
    ex.result = result(ResultStatus::kOk, std::string("out\0put", 7), "");
    const Outcome o = run(ex);
    CHECK(o.kind == Kind::kOk);
    CHECK(o.output == std::string("out\0put", 7));
    CHECK(o.fingerprint.empty());
    CHECK(o.exit_code == 0);
    CHECK(o.signal == 0);
    CHECK(o.cpu_ms == 4);
    CHECK(o.wall_ms == 12);
    CHECK(o.max_rss_kb == 2048);
    CHECK(o.pid == kPid);
  }
  SUBCASE("handler error") {
    Execution ex = exited(0);
    ex.result = result(ResultStatus::kHandlerError, "", "bad byte at offset 1234");
    const Outcome o = run(ex);
    CHECK(o.kind == Kind::kHandlerError);
    CHECK(o.message == "bad byte at offset 1234");
    CHECK(o.output.empty());
    check_fingerprint_shape(o);
    // Numbers are normalized: same class of error, same fingerprint.
    Execution other = exited(0);
    other.result = result(ResultStatus::kHandlerError, "", "bad byte at offset 99");
    CHECK(run(other).fingerprint == o.fingerprint);
    Execution different = exited(0);
    different.result = result(ResultStatus::kHandlerError, "", "truncated header");
    CHECK(run(different).fingerprint != o.fingerprint);
  }
  SUBCASE("output limit reported by the child") {
    Execution ex = exited(0);
    ex.result = result(ResultStatus::kOutputLimit, "", "output over 16 MiB");
    const Outcome o = run(ex);
    CHECK(o.kind == Kind::kOutputLimit);
    CHECK(o.message == "output over 16 MiB");
  }
  SUBCASE("out of memory reported by the child") {
    Execution ex = exited(0);
    ex.result = result(ResultStatus::kOutOfMemory, "", "std::bad_alloc");
    const Outcome o = run(ex);
    CHECK(o.kind == Kind::kOom);
    CHECK(o.message == "std::bad_alloc");
  }
  SUBCASE("ok but over the output cap") {
    Execution ex = exited(0);
    ex.limits.output_bytes = 10;
    ex.result = result(ResultStatus::kOk, std::string(11, 'x'), "");
    const Outcome o = run(ex);
    CHECK(o.kind == Kind::kOutputLimit);
    CHECK(o.output.empty());
    CHECK(o.message == "result of 11 bytes over the cap of 10");
    ex.result = result(ResultStatus::kOk, std::string(10, 'x'), "");
    CHECK(run(ex).kind == Kind::kOk);
  }
  SUBCASE("exit without a result") {
    const Outcome o = run(exited(0));
    CHECK(o.kind == Kind::kProtocolError);
    CHECK(o.message == "the child exited with code 0 without sending a result");
    const Outcome o3 = run(exited(3));
    CHECK(o3.kind == Kind::kProtocolError);
    CHECK(o3.exit_code == 3);
  }
  SUBCASE("a protocol violation outranks a result") {
    Execution ex = exited(0);
    ex.result = result(ResultStatus::kOk, "fine", "");
    ex.protocol_violation = "RESULT for task 8 on the channel of task 7";
    const Outcome o = run(ex);
    CHECK(o.kind == Kind::kProtocolError);
    CHECK(o.message == ex.protocol_violation);
  }
}

TEST_CASE("classifier: the sandbox could not be set up") {
  SUBCASE("SETUP_FAILED") {
    Execution ex = exited(1);
    ex.setup_failure = "cannot load seccomp filter";
    const Outcome o = run(ex);
    CHECK(o.kind == Kind::kSandboxError);
    CHECK(o.message == "sandbox setup failed: cannot load seccomp filter");
  }
  SUBCASE("never launched") {
    Execution ex = base();
    ex.exit.reset();
    ex.launch_error = "fork: Resource temporarily unavailable";
    const Outcome o = run(ex);
    CHECK(o.kind == Kind::kSandboxError);
    CHECK(o.message == "fork: Resource temporarily unavailable");
    CHECK(o.exit_code == -1);
    CHECK(o.pid == 0);
    check_fingerprint_shape(o);
    ex.launch_error.clear();
    CHECK(run(ex).message == "the child never started");
  }
}

TEST_CASE("classifier: exec mode") {
  SUBCASE("exit 0: stdout is the output") {
    Execution ex = exited(0);
    ex.exec_mode = true;
    ex.exit->stdout_data = "hello\n";
    ex.exit->stdout_size = 6;
    const Outcome o = run(ex);
    CHECK(o.kind == Kind::kOk);
    CHECK(o.output == "hello\n");
    CHECK(o.exit_code == 0);
  }
  SUBCASE("non-zero exit: handler error with the last stderr line") {
    Execution ex = exited(3);
    ex.exec_mode = true;
    ex.exit->stderr_tail = "reading input\nerror: unexpected token at 17\n\n";
    const Outcome o = run(ex);
    CHECK(o.kind == Kind::kHandlerError);
    CHECK(o.exit_code == 3);
    CHECK(o.message == "exit code 3: error: unexpected token at 17");
    Execution quiet = exited(3);
    quiet.exec_mode = true;
    CHECK(run(quiet).message == "exit code 3");
  }
  SUBCASE("stdout over the cap") {
    Execution ex = exited(0);
    ex.exec_mode = true;
    ex.limits.output_bytes = 10;
    ex.exit->stdout_data = std::string(11, 'x');
    ex.exit->stdout_size = 5000;
    const Outcome o = run(ex);
    CHECK(o.kind == Kind::kOutputLimit);
    CHECK(o.message == "wrote 5000 bytes to stdout, over the cap of 10");
    CHECK(o.output.empty());
  }
  SUBCASE("protocol violation with exit 0") {
    Execution ex = exited(0);
    ex.exec_mode = true;
    ex.protocol_violation = "unexpected frame from an exec child";
    const Outcome o = run(ex);
    CHECK(o.kind == Kind::kProtocolError);
    CHECK(o.message == "unexpected frame from an exec child");
  }
  SUBCASE("an exit before the payload was delivered is never the payload's fault, whatever its code") {
    for (int code : {0, 1, 123}) {
      Execution ex = exited(code);
      ex.exec_mode = true;
      ex.payload_delivered = false;
      const Outcome o = run(ex);
      CHECK(o.kind == Kind::kSandboxError);
      CHECK(o.message == "the child exited with code " + std::to_string(code) +
                             " before asking for its payload (not the payload's fault)");
    }
    Execution broken = exited(0);
    broken.payload_delivered = false;
    broken.protocol_violation = "a frame that is not msgpack";
    const Outcome b = run(broken);
    CHECK(b.kind == Kind::kSandboxError);
    CHECK(b.message == "a frame that is not msgpack (before the payload was sent: not the payload's fault)");
    CHECK(b.before_payload);
  }
  SUBCASE("a RESULT from the exec runtime: execve failed, which is not the payload's fault") {
    Execution ex = exited(127);
    ex.exec_mode = true;
    ex.result = result(ResultStatus::kExecFailed, "", "execve /nope: No such file or directory");
    const Outcome o = run(ex);
    CHECK(o.kind == Kind::kSandboxError);
    CHECK(o.message == "cannot run the program: execve /nope: No such file or directory");
  }
}

TEST_CASE("classifier: a failure before the payload was sent keeps its kind and is marked as such") {
  // A crash, an exit or a kill of a child that never asked for its payload
  // (a plugin's init in the child, a child stopped by a leftover of its uid).
  for (Execution ex : {signaled(SIGSEGV), signaled(SIGKILL), exited(3), exited(1)}) {
    ex.payload_delivered = false;
    const Outcome o = run(ex);
    CHECK(o.kind != Kind::kOk);
    CHECK(o.before_payload);
    ex.payload_delivered = true;
    CHECK_FALSE(run(ex).before_payload);
  }
  Execution ok = exited(0);
  ok.result = result(ResultStatus::kOk, "out", "");
  CHECK_FALSE(run(ok).before_payload);
  Execution never_started;  // no exit at all: a sandbox-error of its own
  CHECK(run(never_started).kind == Kind::kSandboxError);
  CHECK_FALSE(run(never_started).before_payload);
}

TEST_CASE("classifier: fingerprints") {
  SUBCASE("same inputs, same fingerprint; different handler, different fingerprint") {
    for (int sig : {SIGSEGV, SIGKILL, SIGXCPU}) {
      CAPTURE(sig);
      const Outcome a = run(signaled(sig));
      const Outcome b = run(signaled(sig));
      check_fingerprint_shape(a);
      CHECK(a.fingerprint == b.fingerprint);
      Execution other = signaled(sig);
      other.handler_identity = "inflate";
      CHECK(run(other).fingerprint != a.fingerprint);
    }
    CHECK(run(signaled(SIGSEGV)).fingerprint != run(signaled(SIGBUS)).fingerprint);
    CHECK(run(signaled(SIGXCPU)).fingerprint != run(signaled(SIGXFSZ)).fingerprint);
  }
  SUBCASE("ok has no fingerprint") {
    Execution ex = exited(0);
    ex.result = result(ResultStatus::kOk, "", "");
    CHECK(run(ex).fingerprint.empty());
  }
  SUBCASE("different crash sites, different fingerprints; same site, same fingerprint") {
    const auto* first = reinterpret_cast<const void*>(&pbclassifytest::parse_header_bug);
    const auto* second = reinterpret_cast<const void*>(&pbclassifytest::inflate_block_bug);
    const auto* caller = reinterpret_cast<const void*>(&pbclassifytest::caller_of_bugs);

    Execution a = signaled(SIGSEGV);
    a.exit->crash = report(kPid, SIGSEGV, frame_line(first, 4) + frame_line(caller, 8));
    Execution b = signaled(SIGSEGV);
    b.exit->crash = report(kPid, SIGSEGV, frame_line(second, 4) + frame_line(caller, 12));
    // Same function as `a`, another pc inside it and another payload: same bug.
    Execution a2 = signaled(SIGSEGV);
    a2.exit->crash = report(kPid, SIGSEGV, frame_line(first, 6) + frame_line(caller, 10));

    const Outcome oa = run(a), ob = run(b), oa2 = run(a2);
    CHECK(oa.kind == Kind::kCrash);
    CHECK(ob.kind == Kind::kCrash);
    CHECK(oa.crash_state ==
          std::vector<std::string>{"pbclassifytest::parse_header_bug", "pbclassifytest::caller_of_bugs"});
    CHECK(ob.crash_state ==
          std::vector<std::string>{"pbclassifytest::inflate_block_bug", "pbclassifytest::caller_of_bugs"});
    check_fingerprint_shape(oa);
    check_fingerprint_shape(ob);
    CHECK(oa.fingerprint != ob.fingerprint);
    CHECK(oa2.fingerprint == oa.fingerprint);
    // And the same site without a report is yet another identity.
    CHECK(run(signaled(SIGSEGV)).fingerprint != oa.fingerprint);
  }
}

TEST_CASE("signal_name") {
  CHECK(signal_name(SIGSEGV) == "SIGSEGV");
  CHECK(signal_name(SIGKILL) == "SIGKILL");
  CHECK(signal_name(SIGSYS) == "SIGSYS");
  CHECK(signal_name(99) == "signal 99");
}

}  // namespace
}  // namespace pillbox
