#pragma once
// Ending what a task started. When a task's main process has exited, the
// rest of its process group is killed; its members were reparented to us
// (we are a child subreaper) and are reaped here, so none lingers as a zombie
// counting against the sandbox user's RLIMIT_NPROC when the next task starts.
#include <sys/types.h>

namespace pillbox {

// SIGKILLs the group and reaps every member that is already dead. Returns
// true when no child of ours is left in the group (the task is fully gone);
// false means some are still dying: call again on the next SIGCHLD.
bool reap_process_group(pid_t pgid);

}  // namespace pillbox
