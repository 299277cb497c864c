#pragma once
// A task's own writable directories (child side). Under a read-only view of
// the host (policy `filesystem = read-only`) with `tmp = SIZE`, each task
// enters a mount namespace of its own in which /tmp, /var/tmp and /dev/shm
// are empty tmpfs mounts of SIZE each, and /tmp is its working directory;
// its /dev there is its own too: a few nodes bound from the host's (null,
// zero, full, random, urandom), its /dev/shm, and a devpts instance of its
// own, so that no terminal it opens is the host's.
// What it writes there is private (no other task, and not the host, sees
// it), counts against its memory cgroup (tmpfs pages are charged to the
// process that writes them), and is gone when the task's last process
// exits, taking the mount namespace with it (spawn mode), or when the slot's
// next task starts and the run ends (zygote mode, see below).
//
// What the command line names under those directories (`keep_visible`, e.g.
// a script in /tmp) is bound read-only at its own path inside the new tmpfs,
// opened before the tmpfs hides it; the policy's shared paths there (--share)
// are bound back read-only, its writable paths read-write. A bind shows the
// host's directory live; a bound file is the file that was there when the
// namespace was made (a slot's, in zygote mode: the run's start).
//
// Runs as root (or with the capabilities of the zygote's user namespace),
// after the wire is connected (the runtime directory may lie under /tmp)
// and before the privilege drop.
#include <string>
#include <vector>

#include "shared/policy.h"
#include "shared/status.h"
#include "shared/unique_fd.h"

namespace pillbox::sandbox {

// Spawn mode: a mount namespace of the child's own, set up, entered, and
// /tmp its working directory. It dies with the task's last process.
// `payload_dir`: the command names the payload's file, which lives in
// /tmp/pillbox-input, a tmpfs of its own (shared/task_input.h).
Status enter_private_tmp(const Isolation& isolation, const std::vector<std::string>& keep_visible, bool payload_dir);

// Zygote mode: unsharing and tearing down a mount namespace per task costs
// about 1.5 ms (measured: the teardown waits for RCU), most of a small
// task's budget. So the zygote makes one namespace per job slot, once (in a
// forked process that sets it up, then dies; the returned fd keeps it), and
// each task of the slot joins it (setns, ~50 us). Tasks of one slot run one
// after the other, each first emptying what the previous one left
// (empty_private_dirs): never two tasks in one namespace at once, and
// nothing of one reaches the next. The namespace ends with the zygote, or
// when a task of the slot could not empty it (then the next one is made).
struct SlotNamespace {
  UniqueFd ns;           // the mount namespace, to join
  UniqueFd payload_dir;  // its payload dir (shared/task_input.h), for the zygote; invalid when it has none
};
Expected<SlotNamespace> make_slot_namespace(const Isolation& isolation, const std::vector<std::string>& keep_visible,
                                            bool payload_dir);
Status join_private_tmp(int ns_fd);

// In a joined slot namespace, as the task's uid, before the payload: removes
// what the slot's previous task left in /tmp, /var/tmp and /dev/shm (a
// tmpfs's inodes are bounded, so is the cost), never following a symlink,
// never crossing into a bound host path. An error when something the uid
// cannot remove is left that is not root's own: the child then exits
// kExitSlotUncleanable, and the zygote makes the slot a new namespace.
Status empty_private_dirs();

// In the zygote, once a task of the slot ended (its process group is gone):
// removes what its payload dir holds. A file left there until the slot's
// next task stays charged to the slot's memory cgroup, which the supervisor
// then makes anew after every task (CgroupSlots::renew_if_charged); the
// next task's own emptying stays the rule for what this could not remove.
// Only names listed in the directory's fd, never a path: nothing it holds
// can lead outside it.
void remove_payload_files(int payload_dir_fd);

// In a private /tmp, as the task's uid, before the policy's filter: the
// task's payload file, empty, at kPayloadDir/NAME (shared/task_input.h),
// open read-write for the payload to be written into when it arrives. An
// error when a file is already there (a slot whose previous task's file
// could not be removed).
Expected<UniqueFd> create_payload_file(const std::string& name);
// Whether this mount namespace has the payload dir as a mount of its own
// (a private /tmp made by this version of pillbox).
bool has_payload_dir();

}  // namespace pillbox::sandbox
