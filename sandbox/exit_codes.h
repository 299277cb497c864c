#pragma once
// Exit codes of the sandbox runtime itself (never of a handler or exec
// program, which the supervisor classifies by wait status and frames).
namespace pillbox::sandbox {

// A zygote child that could not empty its slot's /tmp, /var/tmp or /dev/shm
// (SETUP_FAILED was sent): the zygote makes the slot's namespace anew.
inline constexpr int kExitSlotUncleanable = 120;
inline constexpr int kExitOrphaned = 121;       // the parent died before the child started
inline constexpr int kExitNoSupervisor = 122;   // the wire never answered
inline constexpr int kExitSetupFailed = 123;    // confinement failed; SETUP_FAILED was sent
inline constexpr int kExitBootstrap = 124;      // spawn mode: bad bootstrap message
inline constexpr int kExitExecFailed = 127;     // exec mode: execve failed after the payload arrived

}  // namespace pillbox::sandbox
