#pragma once
// The guardian: a small process, forked from the supervisor when a run
// starts, whose only job is to kill what the run's tasks leave running when
// the run ends, above all when the supervisor dies without cleaning up
// (SIGKILL, the OOM killer, a crash).
//
// Why it is needed: a zygote's children share its PID namespace and die with
// it, but in spawn mode (no PID namespace) or where the host refuses one, a
// task's background processes (a setsid'd daemon, a double fork) are
// reparented to init when the supervisor dies, and would keep running with no
// limit and no one to stop them. The parent-death signal does not help: it
// reaches only the task's main process, never its descendants.
//
// What it kills, when the supervisor's end of its pipe closes (at the end of
// the run, or because the supervisor died):
//   - every process running as one of the run's slot uids (the uid pool,
//     first with kill(-1) as each uid, which no fork outruns, then from root
//     until none is left, which no SIGSTOP can stop;
//     root only: those uids are claimed by this run alone, and the guardian
//     keeps their claims until it is done, so no new run can be given one
//     while it sweeps);
//   - every process in the run's slot cgroups.
// With neither (no root, no cgroup) it has nothing it could safely name, and
// is not started; the dispatcher says so in a warning.
//
// It runs in its own session (a terminal's Ctrl-C does not reach it) and
// ignores SIGINT, SIGTERM and SIGHUP; after the fork it uses only raw system
// calls on memory prepared before it (the supervisor may have threads).
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
  // Ends the run's guard: the guardian sweeps once more (a setsid'd process
  // of the last task of a slot may still run as its uid), releases the
  // claims it held and exits. Waits for it (a few seconds at most, whatever
  // those processes do: they cannot stop the sweep, shared/uid_sweep.h).
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
