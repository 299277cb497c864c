#pragma once
// Who did it, for the audit trail: the user (and the sudo user behind root)
// and the pillbox command, e.g. "alice via pillbox quarantine discard (pid 412)".
#include <string>

namespace pillbox {

std::string actor_name(const std::string& command);

}  // namespace pillbox
