#pragma once
// Crash capture inside a child: a handler for fatal signals, on an alternate
// stack, that writes a crash report (format in shared/crash_report.h) to a
// pipe opened in advance, then lets the signal kill the process so the
// parent's wait status stays the ground truth.
//
// Everything that allocates or takes locks happens in prepare(): the module
// table is snapshotted and the unwinder is warmed up (glibc's backtrace
// dlopens libgcc_s on first use). The handler itself only formats numbers
// into a static buffer and calls write(2).
namespace pillbox::crash {

// Snapshot the loaded ELF modules and warm up the unwinder. Call after every
// library the task may crash in has been loaded (in the zygote: after the
// handler is prepared), before arm().
void prepare();

// Install the handlers for SIGSEGV, SIGBUS, SIGILL, SIGFPE, SIGABRT, SIGTRAP
// and SIGSYS on an alternate stack; reports go to `report_fd`.
void arm(int report_fd);

}  // namespace pillbox::crash
