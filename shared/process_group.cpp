#include "shared/process_group.h"

#include <signal.h>
#include <sys/wait.h>

#include <cerrno>
#include <mutex>
#include <set>

namespace pillbox {
namespace {

std::mutex claims_mutex;
std::set<pid_t>& claimed() {
  static std::set<pid_t> pids;
  return pids;
}

bool is_claimed(pid_t pid) {
  std::lock_guard lock(claims_mutex);
  return claimed().count(pid) > 0;
}

}  // namespace

pid_t spawn_claimed_child(const std::function<pid_t()>& spawn) {
  std::lock_guard lock(claims_mutex);
  const pid_t pid = spawn();
  if (pid > 0) claimed().insert(pid);
  return pid;
}

void release_claimed_child(pid_t pid) {
  std::lock_guard lock(claims_mutex);
  claimed().erase(pid);
}

void reap_children(const std::function<bool(pid_t)>& is_task,
                   const std::function<void(pid_t, int, const rusage&)>& on_task_exit,
                   const std::function<void(pid_t, int)>& on_other_exit) {
  for (;;) {
    siginfo_t info{};
    // Look without reaping: the zombie must hold its pid while its group is killed.
    if (::waitid(P_ALL, 0, &info, WEXITED | WNOHANG | WNOWAIT | __WALL) != 0 || info.si_pid == 0) return;
    const pid_t pid = info.si_pid;
    // Its owner reaps it (promptly: it waits on the pid). The kernel may
    // offer this zombie first until then, so stop here; the rest next time.
    if (is_claimed(pid)) return;
    if (is_task(pid)) {
      ::kill(-pid, SIGKILL);
      int status = 0;
      rusage ru{};
      if (::wait4(pid, &status, __WALL, &ru) == pid) on_task_exit(pid, status, ru);
    } else {
      int status = 0;
      if (::waitpid(pid, &status, __WALL) == pid && on_other_exit) on_other_exit(pid, status);
    }
  }
}

void kill_task_group(pid_t pid) {
  ::kill(-pid, SIGKILL);
  ::kill(pid, SIGKILL);
}

bool drain_process_group(pid_t pgid) {
  for (;;) {
    const pid_t r = ::waitpid(-pgid, nullptr, WNOHANG | __WALL);
    if (r > 0) continue;
    if (r == 0) return false;  // members alive (dying): not yet
    return errno == ECHILD;    // no child of ours left in the group
  }
}

}  // namespace pillbox
