#pragma once
// Kills, as root, every process that runs as one of a set of uids.
//
// Why not kill(-1) from a process that took the uid (the obvious way, and
// atomic against fork): from the moment such a killer has the uid, every
// process of that uid may signal it too. A leftover that sends SIGSTOP to
// its uid without pause stops the killer, sometimes before it kills, and a
// parent that waits for the killer then waits forever. Root is out of
// their reach: this sweep reads /proc and sends SIGKILL itself, pass after
// pass, until a pass finds none of them alive (a process forked while a pass
// ran is found by the next one; a process with SIGKILL pending cannot fork).
//
// Allocation-free system calls only: the guardian calls it in a process
// forked from a possibly multi-threaded supervisor. Used by the guardian,
// the uid pool's claims, the dispatcher (a slot without a cgroup) and the
// plugin check (what a plugin's loading left behind).
#include <cstddef>
#include <cstdint>

namespace pillbox {

// Sends SIGKILL to every live process whose real, effective or saved uid is
// one of `uids[0..count)`, through a pidfd opened before its uid is read, so
// that a recycled pid is never signalled. Repeats until a pass finds none
// (zombies do not count) or `max_passes` passes ran, 1 ms apart. Returns how
// many processes were signalled; `clear` (if given) says whether the last
// pass found none.
int sweep_uids(const std::uint32_t* uids, std::size_t count, int max_passes, bool* clear = nullptr);

// Zombies whose uid is `uid`: dead, but until their parent (often init,
// which in a container may reap in its own time) collects them, they still
// count against RLIMIT_NPROC of that uid.
int count_zombies_of(std::uint32_t uid);

}  // namespace pillbox
