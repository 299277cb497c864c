#include "sandbox/namespaces.h"

#include <sched.h>
#include <sys/mount.h>
#include <sys/statvfs.h>

#include <cerrno>
#include <cstring>
#include <fstream>
#include <sstream>

namespace pillbox::sandbox {
namespace {

bool try_unshare(int flag, const char* name, NamespaceOutcome& out, const char* consequence) {
  if (::unshare(flag) == 0) {
    out.entered.emplace_back(name);
    return true;
  }
  out.warnings.push_back(std::string(name) + " namespace unavailable (" + std::strerror(errno) + "): " + consequence);
  return false;
}

// Mount points that must stay as they are: kernel interfaces (and the cgroup
// files children write to join their group).
bool keep_writable(const std::string& mount_point) {
  auto under = [&](const char* prefix) {
    const std::size_t n = std::strlen(prefix);
    return mount_point.compare(0, n, prefix) == 0 && (mount_point.size() == n || mount_point[n] == '/');
  };
  if (under("/proc") || under("/sys")) return true;
  if (under("/dev")) return !under("/dev/shm");
  return false;
}

unsigned long preserved_flags(const std::string& mount_point) {
  struct statvfs sv {};
  if (::statvfs(mount_point.c_str(), &sv) != 0) return 0;
  unsigned long flags = 0;
  if (sv.f_flag & ST_NOSUID) flags |= MS_NOSUID;
  if (sv.f_flag & ST_NODEV) flags |= MS_NODEV;
  if (sv.f_flag & ST_NOEXEC) flags |= MS_NOEXEC;
  if (sv.f_flag & ST_NOATIME) flags |= MS_NOATIME;
  if (sv.f_flag & ST_NODIRATIME) flags |= MS_NODIRATIME;
  if (sv.f_flag & ST_RELATIME) flags |= MS_RELATIME;
  return flags;
}

// Remounts every file system read-only inside the new mount namespace.
bool make_read_only(NamespaceOutcome& out) {
  if (::mount(nullptr, "/", nullptr, MS_REC | MS_PRIVATE, nullptr) != 0) {
    out.warnings.push_back(std::string("cannot make mounts private (") + std::strerror(errno) +
                           "): file system left writable");
    return false;
  }
  std::ifstream mountinfo("/proc/self/mountinfo");
  std::string line;
  int failures = 0;
  std::string first_failure;
  while (std::getline(mountinfo, line)) {
    std::istringstream fields(line);
    std::string id, parent, devs, root, mount_point;
    fields >> id >> parent >> devs >> root >> mount_point;
    if (mount_point.empty() || keep_writable(mount_point)) continue;
    const unsigned long flags = MS_REMOUNT | MS_BIND | MS_RDONLY | preserved_flags(mount_point);
    if (::mount(nullptr, mount_point.c_str(), nullptr, flags, nullptr) != 0) {
      if (failures++ == 0) first_failure = mount_point + ": " + std::strerror(errno);
    }
  }
  if (failures > 0) {
    out.warnings.push_back("could not remount " + std::to_string(failures) +
                           " mount(s) read-only (first: " + first_failure + ")");
  }
  return true;
}

}  // namespace

NamespaceOutcome enter_namespaces(const Isolation& isolation) {
  NamespaceOutcome out;
  if (!isolation.network) {
    try_unshare(CLONE_NEWNET, "net", out, "children share the host network (seccomp still denies sockets in strict policies)");
  }
  try_unshare(CLONE_NEWIPC, "ipc", out, "children share System V IPC with the host");
  try_unshare(CLONE_NEWUTS, "uts", out, "children see the host name");
  if (isolation.filesystem == FilesystemMode::kReadOnly) {
    if (try_unshare(CLONE_NEWNS, "mount", out, "the file system stays writable where permissions allow")) {
      if (make_read_only(out)) out.entered.back() = "mount(read-only)";
    }
  }
  return out;
}

}  // namespace pillbox::sandbox
