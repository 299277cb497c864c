#pragma once
// Who did it, for the audit trail: the user (and the sudo user behind root)
// and the pillbox command, e.g. "alice via pillbox quarantine discard (pid 412)".
//
// A program that runs pillbox on someone else's behalf names them in the
// environment: PILLBOX_ACTOR=WHO (at most kMaxActorEnvBytes bytes of
// printable ASCII; an empty, longer or other value is ignored) makes it
// "WHO via pillbox CMD (pid N)". The console's jobs (supervisor/serve/
// console_jobs.h) set it to "web: ADDRESS", the address the action came from.
#include <cstddef>
#include <string>

namespace pillbox {

inline constexpr std::size_t kMaxActorEnvBytes = 200;

std::string actor_name(const std::string& command);

}  // namespace pillbox
