#pragma once
// Seccomp violations as the kernel reports them, not as the task claims.
//
// A denied syscall does not raise SIGSYS in the task (which any program can
// raise itself, after writing a crash report that names whatever syscall it
// likes): the filter's default action is SECCOMP_RET_USER_NOTIF, and the
// listener the kernel hands out when the filter is loaded goes to the task's
// parent (the zygote, or the supervisor in spawn mode) before the task sees
// its payload. The kernel then tells the parent which syscall (number and
// architecture) a process of the task attempted; the parent kills the task.
// The task cannot forge such a notification, and cannot see the listener.
//
//   child (sandbox/child_runtime.cpp)            parent (zygote / spawn launcher)
//   load filter -> listener fd                   ViolationWatch on its socket end
//   send_listener(kListenerSocketFd, listener)   -> receives the listener
//   close both, then HELLO, payload, ...         -> a notification: record it, kill
//
// Where the kernel refuses a listener, the child falls back to SIGSYS
// (SECCOMP_RET_TRAP) and says so by sending none; the name then comes from
// the task's own crash report, and the record says that it does.
#include <cstdint>
#include <optional>
#include <utility>

#include "shared/status.h"
#include "shared/unique_fd.h"

namespace pillbox {

// In a child, until it has handed its listener over.
inline constexpr int kListenerSocketFd = 1001;

// A socketpair for one task: {parent end (non-blocking), child end}.
Expected<std::pair<UniqueFd, UniqueFd>> listener_socketpair();

// Child side: sends `listener` (-1: none, the kernel refused one) over
// `socket_fd` in one message. Only calls sendmsg: fine after the filter.
bool send_listener(int socket_fd, int listener);

struct Violation {
  std::int32_t nr = -1;      // syscall number, as the kernel saw it
  std::uint32_t arch = 0;    // AUDIT_ARCH_* of the call
};

// Parent side, one per task: first the socket, then the listener it brings.
class ViolationWatch {
 public:
  ViolationWatch() = default;
  explicit ViolationWatch(UniqueFd socket) : socket_(std::move(socket)) {}

  // What to poll for readability now (-1: nothing).
  int fd() const;
  // Takes whatever is ready, without blocking. True when this call saw the
  // task's first violation (the caller kills the task).
  bool take();
  const std::optional<Violation>& violation() const { return violation_; }
  // A listener arrived: the kernel, not the task, names violations.
  bool watched() const { return watched_; }

 private:
  UniqueFd socket_;    // until the child's message arrives
  UniqueFd listener_;  // then the kernel's notifications
  bool watched_ = false;
  std::optional<Violation> violation_;
};

}  // namespace pillbox
