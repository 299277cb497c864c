#pragma once
// Who did it, for the audit trail: the user (and the sudo user behind root)
// and the command, e.g. "alice via pillbox quarantine discard (pid 412)".
// PILLBOX_ACTOR=WHO (at most kMaxActorEnvBytes of printable ASCII, else
// ignored) names the user a program runs pillbox for; the console's jobs set
// it to "web: ADDRESS".
#include <cstddef>
#include <string>

namespace pillbox {

inline constexpr std::size_t kMaxActorEnvBytes = 200;

std::string actor_name(const std::string& command);

}  // namespace pillbox
