#pragma once
// The crash report a dying child writes to its crash pipe (fd kCrashFd) from
// its fatal-signal handler, and its strict parser. The writer lives in
// sandbox/crash/crash_capture.cpp and must stay async-signal-safe, so the
// format is plain text, one field per line:
//
//   pillbox-crash 1
//   pid 1234
//   signal 11
//   code 1
//   addr 0x0
//   pc 0x55d0c0a01139
//   sp 0x7ffd2c1f0a40
//   syscall -1          (SIGSYS from seccomp: the syscall number, else -1)
//   arch 0              (SIGSYS: the AUDIT_ARCH_* value, else 0)
//   stack_fault 0       (1 when the fault address lies next to the stack pointer)
//   frame /usr/bin/prog 0x1139     (module path, pc minus the module's load bias)
//   ...
//   end
//
// Everything in it comes from a possibly hostile child: the parser caps sizes
// and rejects anything malformed; the kernel's wait status stays the ground
// truth for the signal.
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "shared/status.h"

namespace pillbox {

inline constexpr int kCrashFd = 1000;               // fixed fd of the crash pipe in a child
inline constexpr std::size_t kMaxCrashFrames = 64;
inline constexpr std::size_t kMaxCrashReportBytes = 64 * 1024;

struct RawFrame {
  std::string module;       // path of the ELF object, "" when unknown
  std::uint64_t offset = 0; // pc minus load bias (or the absolute pc when module is "")
};

struct CrashReport {
  int pid = 0;
  int signal = 0;
  int code = 0;
  std::uint64_t addr = 0;
  std::uint64_t pc = 0;
  std::uint64_t sp = 0;
  long syscall = -1;
  std::uint32_t arch = 0;
  bool stack_fault = false;
  std::vector<RawFrame> frames;  // innermost first, the faulting frame at [0]
};

Expected<CrashReport> parse_crash_report(std::string_view text);

// The crash pipe may hold several reports (a process and its children, or
// garbage written by a hostile child). Returns every well-formed one, in order.
std::vector<CrashReport> parse_crash_reports(std::string_view pipe_contents);

}  // namespace pillbox
