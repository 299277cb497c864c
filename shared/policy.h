#pragma once
// The policy model: limits, isolation and the seccomp allowlist that confine
// one child. Parsed from the human-editable format documented in
// docs/policy-format.md (see policy_parser.h); shipped examples in policies/.
#include <cstdint>
#include <string>
#include <vector>

namespace pillbox {

struct Limits {
  std::uint64_t cpu_ms = 5'000;                  // RLIMIT_CPU (rounded up to whole seconds)
  std::uint64_t wall_ms = 10'000;                // deadline enforced by the supervisor
  std::uint64_t memory_bytes = 512ull << 20;     // cgroup memory limit; RLIMIT_AS adds the baseline
  std::uint64_t file_size_bytes = 64ull << 20;   // RLIMIT_FSIZE (stdout of exec programs counts)
  std::uint64_t open_files = 64;                 // RLIMIT_NOFILE
  std::uint64_t processes = 64;                  // RLIMIT_NPROC (per uid!) and cgroup pids.max
  std::uint64_t stack_bytes = 8ull << 20;        // RLIMIT_STACK
  std::uint64_t output_bytes = 16ull << 20;      // largest result accepted from a child
  // RLIMIT_CORE is always 0: a poison pill must not fill the disk with cores.
};

enum class SeccompDefault : std::uint8_t {
  kTrap,   // the task is stopped and its syscall named: by a user notification
           // to the parent, which kills it, where the kernel has one; else
           // SIGSYS to the child (default)
  kKill,   // kill the process at once; the syscall name is not known
  kErrno,  // the syscall fails with EPERM; the task goes on
};

enum class CgroupMode : std::uint8_t {
  kAuto,      // use a per-task memory cgroup when the host allows, else RLIMIT_AS only
  kRequired,  // refuse to run (setup error) when no cgroup can be used
  kOff,       // never use cgroups
};

enum class FilesystemMode : std::uint8_t {
  kHost,      // the child sees the host filesystem with its normal permissions
  kReadOnly,  // private mount namespace with / remounted read-only (when the host allows)
};

struct Isolation {
  bool network = false;                  // false: empty network namespace (when the host allows)
  std::string user = "nobody";           // user to drop to when started as root (no uid_pool)
  // When started as root: each job slot runs its children under its own uid
  // from [uid_pool_first, uid_pool_first + uid_pool_size), claimed for the
  // run, so tasks cannot signal each other and RLIMIT_NPROC (counted per
  // uid) is per slot: a fork bomb cannot starve its neighbours. 0 = off.
  std::uint32_t uid_pool_first = 0;
  std::uint32_t uid_pool_size = 0;
  CgroupMode cgroup = CgroupMode::kAuto;
  FilesystemMode filesystem = FilesystemMode::kReadOnly;
  // With a read-only file system: each task gets its own empty tmpfs of this
  // size at /tmp (also its working directory), /var/tmp and /dev/shm, in a
  // mount namespace of its own, gone when the task ends; the pages it writes
  // there count against its memory cgroup. 0: none (nothing is writable).
  std::uint64_t tmp_bytes = 0;
  // Host paths bound read-write into the read-only view, on purpose (absolute
  // paths). The shipped policies bind none.
  std::vector<std::string> writable;
  // Host paths shown read-only at their own path where the task would
  // otherwise see something else: under /tmp, /var/tmp and /dev/shm, which
  // a task with `tmp` gets privately (absolute paths; the host's
  // permissions still apply). The shipped policies share none.
  std::vector<std::string> shared;
};

struct SeccompRules {
  bool enabled = true;
  SeccompDefault default_action = SeccompDefault::kTrap;
  // Syscall names as libseccomp knows them. The runtime set (what pillbox's
  // own child runtime needs after the filter is loaded) is always added.
  std::vector<std::string> allow;
};

struct Policy {
  std::string name = "default";
  std::string origin;   // file path or "builtin:NAME"; for messages and records
  // Settings that switch confinement off (unsafe_settings below) are refused
  // unless the policy says so with `allow_unsafe = yes`: a greppable token,
  // never a default. Not part of the identity: it permits, it does not confine.
  bool allow_unsafe = false;
  Limits limits;
  Isolation isolation;
  SeccompRules seccomp;
};

// The settings of `policy` that take away a layer of confinement, each as
// "KEY = VALUE: what it means" ("user = root: tasks run as root, ..."); empty
// for a safe policy. A user name that only resolves to uid 0 on the host is
// caught where it is resolved (supervisor/exec/child_setup.cpp).
std::vector<std::string> unsafe_settings(const Policy& policy);

// True for `user` values that name root without a lookup: "root" and "0".
bool names_root(std::string_view user);

// Stable text identity of a policy (name + a hash of its effective content),
// recorded with every outcome so a replay knows what it ran under.
std::string policy_identity(const Policy& policy);

std::string_view to_string(SeccompDefault action);
std::string_view to_string(CgroupMode mode);
std::string_view to_string(FilesystemMode mode);

}  // namespace pillbox
