#pragma once
// Dropping root: supplementary groups, gid, uid, in that order, then a check
// that there is no way back. Done in the child after it joined its cgroup and
// connected its wire socket (both need root), before the seccomp filter.
#include <cstdint>

#include "shared/status.h"

namespace pillbox::sandbox {

Status drop_privileges(std::uint32_t uid, std::uint32_t gid);
Status set_no_new_privs();

}  // namespace pillbox::sandbox
