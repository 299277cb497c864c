#pragma once
// Linux namespaces for the child side. The zygote enters them once at start
// (its children inherit them: a network namespace per task would cost
// milliseconds each); a spawned child enters them itself. Each one is best
// effort: what the host refuses is reported, never silently skipped.
#include <string>
#include <vector>

#include "shared/policy.h"

namespace pillbox::sandbox {

struct NamespaceOutcome {
  std::vector<std::string> entered;   // "user", "net", "ipc", "uts", "mount(read-only)", "pid"
  bool entered_user = false;          // children must then drop the capabilities it gave them
  bool read_only = false;             // a mount namespace with the host read-only (policy writable paths aside)
  int init_host_pid = 0;              // pid namespace: the init's pid as the host sees it
  std::vector<std::string> warnings;  // "network namespace unavailable (EPERM): children share the host network"
};

// Enters a user namespace first when not running as root (and the host
// allows unprivileged user namespaces): the caller becomes root inside it,
// mapped to its own uid outside, which lets it create the other namespaces.
// Its children must then drop the capabilities this gives them
// (drop_all_capabilities in privileges.h).
NamespaceOutcome enter_namespaces(const Isolation& isolation);

// Zygote only: puts every child it will fork into a new PID namespace, whose
// init (pid 1) is a fork of the caller that goes on as the zygote. The
// calling process stays behind as a bare parent: it waits for the init and
// exits with its status (so it never returns here). Returns true in the new
// init, false (with a warning in `out`) where the host refuses; then the
// caller simply goes on in the host's PID namespace.
//
// Inside: children see only each other and the zygote (/proc is remounted
// for the namespace in a private mount namespace), cannot signal anything
// outside it, and die all at once when the zygote does.
bool become_pid_namespace_init(NamespaceOutcome& out);


}  // namespace pillbox::sandbox
