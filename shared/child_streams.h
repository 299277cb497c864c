#pragma once
// The per-child streams its parent (the zygote, or the supervisor in spawn
// mode) sets up before the fork and reads after the exit: the crash pipe, the
// socket the child hands its seccomp listener over (shared/seccomp_notify.h) and,
// in exec mode, memfds for stdout and stderr (RLIMIT_FSIZE caps them; a flood
// ends in SIGXFSZ rather than in the parent's memory).
#include <cstddef>

#include "shared/control.h"
#include "shared/status.h"
#include "shared/unique_fd.h"

namespace pillbox {

// The stderr kept per attempt: enough for an interpreter's traceback
// (supervisor/classify/traceback.h reads the same amount), read from the end
// of the memfd with one pread, so a flood costs the supervisor nothing more.
inline constexpr std::size_t kStderrTailBytes = 8192;

struct ChildStreams {
  UniqueFd crash_read;    // parent side, non-blocking
  UniqueFd crash_write;   // child side: becomes kCrashFd; non-blocking so a full pipe never blocks a crash
  UniqueFd stdout_file;   // exec mode only: memfd shared by parent and child
  UniqueFd stderr_file;   // exec mode only
  UniqueFd listener_socket;        // parent side: the child hands its seccomp listener over it
  UniqueFd listener_socket_child;  // child side: becomes kListenerSocketFd
};

Expected<ChildStreams> open_child_streams(bool exec_mode);

// In the parent after the child exited: fills report.crash, stdout_data (at
// most output_cap + 1 bytes, so the classifier can see it was exceeded),
// stdout_size and stderr_tail.
void collect_child_streams(ChildStreams& streams, ExitReport& report, std::size_t output_cap);

}  // namespace pillbox
