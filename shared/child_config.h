#pragma once
// What a child needs to know, sent once to a zygote (or with each task to a
// spawned child): the handler, its arguments, the policy, and per task a
// ticket naming its wire endpoint and secret.
#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "shared/policy.h"
#include "shared/wire.h"

namespace pillbox {

// The PATH an exec program gets (it inherits nothing of the supervisor's
// environment): where `#!/usr/bin/env NAME` looks for NAME.
inline constexpr const char* kExecTaskPath = "/usr/local/bin:/usr/bin:/bin";

// The directories a task with a private tmp (policy `tmp`) gets its own
// empty tmpfs at; the first is also its working directory.
inline constexpr const char* kPrivateDirs[] = {"/tmp", "/var/tmp", "/dev/shm"};

struct ChildConfig {
  std::string handler;                        // built-in name, "plugin:PATH" or "exec"
  std::map<std::string, std::string> args;    // --arg K=V
  Policy policy;
  std::vector<std::string> exec_argv;         // exec mode: argv[0] is an absolute path
  bool exec_payload_as_file = false;          // exec mode: "{}" in argv -> payload file path
  std::string crash_lib;                      // exec mode: libpillbox-crash.so to preload ("" = none)
  bool drop_privileges = false;               // started as root: drop to sandbox_uid/gid
  std::uint32_t sandbox_uid = 65534;
  std::uint32_t sandbox_gid = 65534;
  bool use_namespaces = true;                 // try net/ipc/uts (+mount for read-only fs)
  // Files and directories the command line names (the command, its
  // interpreters, argument files, the crash library, a plugin) that lie
  // under a directory a task gets privately (/tmp, /var/tmp, /dev/shm): bound
  // read-only into the private one, so that they stay where they were named.
  std::vector<std::string> keep_visible;
  // Exec mode: the absolute directory the command runs in when the task has
  // no private /tmp (with one, /tmp is its working directory): where `run`
  // was started, or where a record says it ran. "" = wherever the sandbox is.
  std::string working_dir;
  // As root with a uid pool: the uid (and gid) the handler check before the
  // run loads a plugin as (sandbox/plugin_privileges.h). One that this run
  // claimed: the pool's first uid may be another run's slot, whose tasks a
  // plugin running as it could signal and whose children's kill(-1) would
  // kill the check. 0: not given (the pool's first uid).
  std::uint32_t check_uid = 0;

  bool exec_mode() const { return handler == "exec"; }
};

struct TaskTicket {
  std::uint64_t seq = 0;                      // unique per run; names the endpoint
  std::string endpoint;                       // ipc://RUNDIR/w<n>, serving this task alone
  Secret secret{};
  std::vector<std::string> cgroup_procs;      // cgroup.procs files to join (may be empty)
  std::uint32_t uid = 0;                      // with drop_privileges: this task's uid and gid
  std::uint32_t gid = 0;                      // (its slot's, from the uid pool, or sandbox_uid/gid)
  std::uint32_t slot = 0;                     // its job slot: tasks of one slot run one at a time
  // Exec mode: the task's key, for its payload file's name, {key} and
  // $PILLBOX_KEY (shared/task_input.h). At most kMaxTaskKeyBytes.
  std::string key;
};

}  // namespace pillbox
