#pragma once
// The guardian: a process forked when a run starts that kills what the
// run's tasks leave running once the supervisor's end of its pipe closes
// (the run ended, or the supervisor died: SIGKILL, OOM, a crash). Without a
// PID namespace (spawn mode, a refusing host) a task's setsid'd daemons
// would outlive the supervisor, and the parent-death signal reaches only the
// task's main process. See docs/architecture.md, Processes.
//
// It kills every process of the run's slot uids (kill(-1) as each uid, then
// from root; it keeps the uid claims until done, so no new run gets one
// mid-sweep) and of the slot cgroups. With neither it is not started.
// It runs in its own session, ignores SIGINT, SIGTERM and SIGHUP, and after
// the fork makes only raw system calls (the supervisor may have threads).
#include <sys/types.h>

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "shared/status.h"

namespace pillbox {

struct GuardianTargets {
  std::vector<std::uint32_t> uids;         // exclusive to this run (uid pool claims)
  std::vector<std::string> cgroup_procs;   // cgroup.procs files of the slot groups
  std::vector<int> keep_fds;               // held open by the guardian until it exits (the uid claims)

  bool empty() const { return uids.empty() && cgroup_procs.empty(); }
};

class Guardian {
 public:
  // Forks the guardian. An error only when fork or pipe fail.
  static Expected<std::unique_ptr<Guardian>> start(const GuardianTargets& targets);
  // The guardian sweeps once more, releases the claims it held and exits;
  // waits for it (a few seconds at most: nothing swept can stop the sweep,
  // shared/uid_sweep.h).
  ~Guardian();
  Guardian(const Guardian&) = delete;
  Guardian& operator=(const Guardian&) = delete;

  pid_t pid() const { return pid_; }

 private:
  Guardian(int pipe_write, pid_t pid) : pipe_write_(pipe_write), pid_(pid) {}
  int pipe_write_ = -1;  // its only other copy is the guardian's read end
  pid_t pid_ = -1;
};

}  // namespace pillbox
