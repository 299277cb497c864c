#pragma once
// Crash capture inside a child: a handler for fatal signals, on an alternate
// stack, that writes a crash report (format in shared/crash_report.h) to a
// pipe opened in advance, then lets the signal kill the process so the
// parent's wait status stays the ground truth.
//
// Everything that allocates or takes locks happens in prepare(): the module
// table is snapshotted and the unwinder is warmed up (its one-time setup
// and lazy symbol bindings happen then, not in the handler). The handler
// itself only unwinds, formats numbers into a static buffer and calls
// write(2). The unwinder is libgcc's _Unwind_Backtrace: the sandbox runtime
// has it from libgcc_s, which libstdc++ loads anyway; the preloaded library
// carries its own hidden copy (CMakeLists.txt says why).
namespace pillbox::crash {

// Snapshot the loaded ELF modules and warm up the unwinder. Call after every
// library the task may crash in has been loaded (in the zygote: after the
// handler is prepared), before arm().
void prepare();

// Install the handlers for SIGSEGV, SIGBUS, SIGILL, SIGFPE, SIGABRT, SIGTRAP
// and SIGSYS on an alternate stack; reports go to `report_fd`.
void arm(int report_fd);

}  // namespace pillbox::crash
