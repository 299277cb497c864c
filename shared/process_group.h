#pragma once
// Ending what a task started, without ever signalling a stranger.
//
// A task's main process leads its own process group. When it exits, the
// rest of the group must die too. The group is killed while the main
// process is still an unreaped zombie: a zombie keeps its pid, and so the
// group id, reserved, so the kill cannot reach a process that reused the
// number. Only then is the main process reaped. Group members were
// reparented to us (we are a child subreaper, or the PID namespace's init)
// and are reaped afterwards, without signalling again.
#include <sys/resource.h>
#include <sys/types.h>

#include <functional>

namespace pillbox {

// Reaps every exited child of the calling process. For a child that
// `is_task(pid)` names as a task's main process: SIGKILLs its process group
// first, then reaps it and calls `on_task_exit(pid, wait_status, rusage)`.
// Other children (orphans, group members, a helper of the caller's) are
// reaped, and `on_other_exit(pid, wait_status)` is called when given.
void reap_children(const std::function<bool(pid_t)>& is_task,
                   const std::function<void(pid_t, int, const rusage&)>& on_task_exit,
                   const std::function<void(pid_t, int)>& on_other_exit = {});

// Children that another thread of this process waits for itself (the alert
// hook's commands): reap_children leaves them alone. `spawn` runs under the
// registry's lock and returns the new child's pid (or -1), so the child is
// registered before reap_children can see it exit. The owner calls
// release_claimed_child once it has reaped it.
pid_t spawn_claimed_child(const std::function<pid_t()>& spawn);
void release_claimed_child(pid_t pid);

// SIGKILLs a task: its process group, and the main process itself (in case
// it left the group). Only for a main process not yet reaped, whose pid and
// group id are still its own.
void kill_task_group(pid_t pid);

// Reaps what is already dead in a (killed) group. True when no child of
// ours is left in it: the task is fully gone. Never signals.
bool drain_process_group(pid_t pgid);

}  // namespace pillbox
