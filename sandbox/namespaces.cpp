#include "sandbox/namespaces.h"

#include <sched.h>
#include <sys/mount.h>
#include <sys/prctl.h>
#include <sys/statvfs.h>
#include <sys/wait.h>
#include <unistd.h>

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

// The policy's writable paths (its own choice, or --writable), bound onto
// themselves and remounted read-write inside the read-only view.
void bind_writable(const std::vector<std::string>& paths, NamespaceOutcome& out) {
  for (const std::string& path : paths) {
    if (::mount(path.c_str(), path.c_str(), nullptr, MS_BIND | MS_REC, nullptr) != 0 ||
        ::mount(nullptr, path.c_str(), nullptr, MS_REMOUNT | MS_BIND | MS_NOSUID | MS_NODEV | preserved_flags(path),
                nullptr) != 0) {
      out.warnings.push_back("writable path " + path + " cannot be bound read-write (" + std::strerror(errno) +
                             "): it stays read-only");
    }
  }
}

bool in_mount_namespace(const NamespaceOutcome& out) {
  for (const auto& ns : out.entered) {
    if (ns.rfind("mount", 0) == 0) return true;
  }
  return false;
}

}  // namespace

namespace {

// The calling process's pid in the outermost PID namespace /proc belongs to.
int outer_pid() {
  std::ifstream status("/proc/self/status");
  std::string line;
  while (std::getline(status, line)) {
    if (line.rfind("NSpid:", 0) == 0) {
      std::istringstream fields(line.substr(6));
      int pid = 0;
      if (fields >> pid) return pid;
    }
  }
  return ::getpid();
}

bool write_proc_file(const char* path, const std::string& value) {
  std::ofstream f(path);
  f << value;
  f.flush();
  return static_cast<bool>(f);
}

// Root inside, our own uid and gid outside; setgroups denied (required
// before an unprivileged gid_map, and nothing here needs it).
bool enter_user_namespace(NamespaceOutcome& out) {
  const uid_t uid = ::geteuid();
  const gid_t gid = ::getegid();
  if (::unshare(CLONE_NEWUSER) != 0) {
    out.warnings.push_back(std::string("user namespace unavailable (") + std::strerror(errno) +
                           "): without root, children get no network, mount or pid namespace");
    return false;
  }
  if (!write_proc_file("/proc/self/setgroups", "deny") ||
      !write_proc_file("/proc/self/uid_map", "0 " + std::to_string(uid) + " 1") ||
      !write_proc_file("/proc/self/gid_map", "0 " + std::to_string(gid) + " 1")) {
    out.warnings.push_back("user namespace: cannot write the uid/gid maps; other namespaces may be refused");
  }
  out.entered.emplace_back("user");
  out.entered_user = true;
  return true;
}

}  // namespace

bool become_pid_namespace_init(NamespaceOutcome& out) {
  if (::unshare(CLONE_NEWPID) != 0) {
    out.warnings.push_back(std::string("pid namespace unavailable (") + std::strerror(errno) +
                           "): children can see the host's processes; process groups, cgroups and "
                           "per-slot uids still contain them");
    return false;
  }
  const pid_t init = ::fork();
  if (init < 0) {
    out.warnings.push_back(std::string("pid namespace: fork failed (") + std::strerror(errno) + ")");
    return false;
  }
  if (init > 0) {
    // The bare parent: the init holds the control pipes from now on.
    ::close(0);
    ::close(1);
    int status = 0;
    while (::waitpid(init, &status, 0) < 0 && errno == EINTR) {
    }
    _exit(WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status));
  }
  // The new init. It dies with the bare parent, which dies with the supervisor.
  ::prctl(PR_SET_PDEATHSIG, SIGKILL);
  out.entered.emplace_back("pid");
  out.init_host_pid = outer_pid();  // before /proc shows only this namespace
  // A /proc of this namespace, in a mount namespace of our own.
  bool mount_ns = in_mount_namespace(out);
  if (!mount_ns && ::unshare(CLONE_NEWNS) == 0 && ::mount(nullptr, "/", nullptr, MS_REC | MS_PRIVATE, nullptr) == 0) {
    mount_ns = true;
  }
  if (!mount_ns || ::mount("proc", "/proc", "proc", MS_NOSUID | MS_NODEV | MS_NOEXEC, nullptr) != 0) {
    out.warnings.push_back(std::string("cannot mount a /proc for the pid namespace (") + std::strerror(errno) +
                           "): children see the host's processes in /proc (but cannot signal them)");
  }
  return true;
}

NamespaceOutcome enter_namespaces(const Isolation& isolation) {
  NamespaceOutcome out;
  if (::geteuid() != 0) enter_user_namespace(out);
  if (!isolation.network) {
    try_unshare(CLONE_NEWNET, "net", out, "children share the host network (seccomp still denies sockets in strict policies)");
  }
  try_unshare(CLONE_NEWIPC, "ipc", out, "children share System V IPC with the host");
  try_unshare(CLONE_NEWUTS, "uts", out, "children see the host name");
  if (isolation.filesystem == FilesystemMode::kReadOnly) {
    if (try_unshare(CLONE_NEWNS, "mount", out, "the file system stays writable where permissions allow")) {
      if (make_read_only(out)) {
        out.entered.back() = "mount(read-only)";
        out.read_only = true;
        bind_writable(isolation.writable, out);
      }
    }
  }
  return out;
}

}  // namespace pillbox::sandbox
