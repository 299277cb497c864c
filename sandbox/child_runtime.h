#pragma once
// One confined child: from the fork (or exec, in spawn mode) to _exit. The
// order of the steps is the security argument, so it lives in one place
// (run_child; docs/architecture.md, 'The path of one task', and
// docs/security.md, section 3.2):
//   new session, parent-death signal, fds, environment, cgroup,
//   crash handler, connect the wire (as root: the runtime dir is 0700),
//   private tmp (a mount namespace of its own, when the policy gives one),
//   rlimits, drop privileges, no_new_privs, seccomp (its listener handed to
//   the parent), HELLO,
//   receive the payload, run the handler (or execve), RESULT, _exit.
#include <sched.h>
#include <sys/types.h>

#include <memory>

#include "sandbox/handler.h"
#include "sandbox/seccomp_filter.h"
#include "shared/child_config.h"

namespace pillbox::sandbox {

// Built once per zygote (or once per spawned child): everything that
// allocates, loads libraries or compiles.
struct PreparedChild {
  ChildConfig config;
  // Null in exec mode, and for a plugin when running as root: each child
  // loads it after dropping privileges (sandbox/plugin_privileges.h).
  std::unique_ptr<Handler> handler;
  CompiledFilter filter;
  // A plugin loaded in the child (as root): namespaces denied while its
  // constructors and init run, before `filter` (compile_namespace_filter).
  CompiledFilter plugin_load_filter;
  pid_t parent_pid = 0;              // the process that forks children (for the PDEATHSIG race)
  bool in_user_namespace = false;    // the zygote entered one: children drop their capabilities
  bool read_only_view = false;       // the zygote's mount namespace shows the host read-only
  // The CPUs a child may use. The zygote pins itself to one CPU (see
  // zygote.cpp); each child takes back the full set.
  bool restore_affinity = false;
  cpu_set_t affinity{};
};

// `check_deferred`: a handler loaded only in the children (a plugin, as
// root) is first checked once as an unprivileged uid (the zygote, spawn
// mode's --check); a spawned child skips it, its launcher checked already.
Expected<PreparedChild> prepare_child(const ChildConfig& config, bool check_deferred = true);

// Where the parent put the child's streams before the fork.
struct ChildFds {
  int crash_write = -1;   // becomes kCrashFd
  int listener_socket = -1;  // becomes kListenerSocketFd: the seccomp listener goes to the parent over it
  int stdout_fd = -1;     // exec mode: becomes fd 1 (else /dev/null)
  int stderr_fd = -1;     // exec mode: becomes fd 2 (else /dev/null)
  int mount_ns = -1;      // zygote, private tmp: the slot's mount namespace to join (sandbox/private_tmp.h)
  // Zygote, exec mode: the memory file the payload goes into, made by the
  // zygote (access time 0), which keeps it to see whether the task read it.
  int payload_memfd = -1;
};

// Never returns. `enter_own_namespaces` is for spawn mode (a zygote's
// children inherit the zygote's namespaces).
[[noreturn]] void run_child(const PreparedChild& prepared, const TaskTicket& ticket, const ChildFds& fds,
                            bool enter_own_namespaces);

}  // namespace pillbox::sandbox
