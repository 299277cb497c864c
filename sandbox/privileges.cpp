#include "sandbox/privileges.h"

#include <grp.h>
#include <linux/capability.h>
#include <sys/syscall.h>
#include <sys/prctl.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <string>

namespace pillbox::sandbox {

Status drop_privileges(std::uint32_t uid, std::uint32_t gid) {
  if (::setgroups(0, nullptr) != 0) return Status::error(std::string("setgroups: ") + std::strerror(errno));
  if (::setresgid(gid, gid, gid) != 0) return Status::error(std::string("setresgid: ") + std::strerror(errno));
  if (::setresuid(uid, uid, uid) != 0) return Status::error(std::string("setresuid: ") + std::strerror(errno));
  if (uid != 0 && ::setuid(0) == 0) return Status::error("privilege drop is reversible (setuid(0) succeeded)");
  return Status::ok();
}

Status drop_all_capabilities() {
  for (int cap = 0; cap <= 63; ++cap) {
    if (::prctl(PR_CAPBSET_DROP, cap, 0, 0, 0) != 0 && errno != EINVAL) {
      return Status::error(std::string("prctl(PR_CAPBSET_DROP): ") + std::strerror(errno));
    }
  }
  ::prctl(PR_CAP_AMBIENT, PR_CAP_AMBIENT_CLEAR_ALL, 0, 0, 0);
  __user_cap_header_struct header{};
  header.version = _LINUX_CAPABILITY_VERSION_3;
  header.pid = 0;
  __user_cap_data_struct data[2] = {};
  if (::syscall(SYS_capset, &header, data) != 0) return Status::error(std::string("capset: ") + std::strerror(errno));
  return Status::ok();
}

Status set_no_new_privs() {
  if (::prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) != 0) {
    return Status::error(std::string("prctl(PR_SET_NO_NEW_PRIVS): ") + std::strerror(errno));
  }
  return Status::ok();
}

}  // namespace pillbox::sandbox
