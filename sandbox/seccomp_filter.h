#pragma once
// The seccomp-bpf allowlist of a child. Compiled once with libseccomp (in the
// zygote, before any fork) into a BPF program that each child loads with one
// seccomp(2) call (the child runtime is single-threaded at that point).
#include <linux/filter.h>

#include <string>
#include <vector>

#include "shared/policy.h"
#include "shared/status.h"

namespace pillbox::sandbox {

struct CompiledFilter {
  std::vector<sock_filter> program;  // empty: seccomp disabled by the policy
  // With `default = trap`, `program` answers a denied syscall with
  // SECCOMP_RET_USER_NOTIF (the kernel tells a listener, shared/seccomp_notify.h);
  // `fallback` is the same filter with SECCOMP_RET_TRAP, for a kernel that
  // refuses a listener. Empty otherwise.
  std::vector<sock_filter> fallback;
  bool notifies = false;
};

// What pillbox's own child runtime needs after the filter is loaded (wire
// I/O, memory, signals, exit); always allowed in addition to the policy.
const std::vector<std::string>& runtime_syscalls(bool exec_mode);

Expected<CompiledFilter> compile_filter(const SeccompRules& rules, bool exec_mode);

// Loaded before plugin code runs in a process (its constructors and init,
// which come before the policy's filter): every syscall is allowed, except
// those that create or enter a namespace, which fail (clone and unshare with
// a namespace flag, setns: EPERM; clone3: ENOSYS, as in every filter). In a
// new user namespace a plugin would hold every capability, and the code that
// then parses each payload would run with them.
Expected<CompiledFilter> compile_namespace_filter();

// Loads the program into the calling process. Needs no_new_privs (or
// CAP_SYS_ADMIN). Returns the listener of a notifying filter, or -1 (no
// listener: seccomp disabled, a default other than trap, or the kernel
// refused one and the fallback was loaded).
Expected<int> load_filter(const CompiledFilter& filter);

}  // namespace pillbox::sandbox
