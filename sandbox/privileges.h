#pragma once
// Dropping root: supplementary groups, gid, uid, in that order, then a check
// that there is no way back. Done in the child after it joined its cgroup and
// connected its wire socket (both need root), before the seccomp filter.
#include <cstdint>

#include "shared/status.h"

namespace pillbox::sandbox {

Status drop_privileges(std::uint32_t uid, std::uint32_t gid);

// In a user namespace the child is root inside (the only uid mapped), with
// every capability over the namespaces the zygote created. It keeps the uid
// and gives up the capabilities instead: bounding set, ambient, effective,
// permitted and inheritable sets, for good (no_new_privs follows).
Status drop_all_capabilities();
Status set_no_new_privs();

}  // namespace pillbox::sandbox
