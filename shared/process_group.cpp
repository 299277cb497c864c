#include "shared/process_group.h"

#include <signal.h>
#include <sys/wait.h>

#include <cerrno>

namespace pillbox {

bool reap_process_group(pid_t pgid) {
  ::kill(-pgid, SIGKILL);
  for (;;) {
    const pid_t r = ::waitpid(-pgid, nullptr, WNOHANG | __WALL);
    if (r > 0) continue;
    if (r == 0) return false;           // members alive (dying): not yet
    return errno == ECHILD;             // no child of ours left in the group
  }
}

}  // namespace pillbox
