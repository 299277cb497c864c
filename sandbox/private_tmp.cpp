#include "sandbox/private_tmp.h"

#include <dirent.h>
#include <fcntl.h>
#include <signal.h>
#include <sys/wait.h>
#include <sched.h>
#include <linux/openat2.h>
#include <sys/mount.h>
#include <sys/syscall.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <iterator>
#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <string>
#include <string_view>
#include <vector>

#include "shared/child_config.h"
#include "shared/fault_injection.h"
#include "shared/task_input.h"
#include "shared/unique_fd.h"

namespace pillbox::sandbox {
namespace {

std::string errno_text(const std::string& what) { return what + ": " + std::strerror(errno); }

bool is_dir(const char* path) {
  struct stat st {};
  return ::stat(path, &st) == 0 && S_ISDIR(st.st_mode);
}

bool under_private_dir(const std::string& path) {
  for (const char* dir : kPrivateDirs) {
    if (path.rfind(std::string(dir) + "/", 0) == 0) return true;
  }
  return false;
}

// Creates the directories above `path` (inside the new tmpfs) and an empty
// file or directory at `path` to bind onto.
Status make_mount_point(const std::string& path, bool directory) {
  for (std::size_t slash = path.find('/', 1); slash != std::string::npos; slash = path.find('/', slash + 1)) {
    const std::string parent = path.substr(0, slash);
    if (::mkdir(parent.c_str(), 0755) != 0 && errno != EEXIST) return Status::error(errno_text("mkdir " + parent));
  }
  if (directory) {
    if (::mkdir(path.c_str(), 0755) != 0 && errno != EEXIST) return Status::error(errno_text("mkdir " + path));
    return Status::ok();
  }
  const int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_CLOEXEC | O_NOFOLLOW, 0644);
  if (fd < 0) return Status::error(errno_text("creating " + path));
  ::close(fd);
  return Status::ok();
}

// The devices a program may need, no more: the host's /dev holds its
// terminals (a task opening /dev/ptmx allocated ptys in the host's
// /dev/pts, against the host-wide kernel.pty.max that ssh and tmux need),
// its disks and whatever else udev made. Bound from the host's nodes.
constexpr const char* kDevices[] = {"null", "zero", "full", "random", "urandom"};
// Terminals come from a devpts instance of the task's own: at most this many
// at once, none of them the host's (the kernel keeps kernel.pty.reserve
// for the host's own instance).
constexpr int kPrivatePtys = 16;

// In the new mount namespace, before the private tmpfs mounts (/dev/shm is
// one of them, made inside this /dev): a small read-only tmpfs on /dev with
// the nodes above bound from the host's, a private devpts on /dev/pts with
// /dev/ptmx pointing into it, /dev/shm to mount on, and the /dev/fd,
// stdin, stdout and stderr links scripts use.
Status set_up_private_dev() {
  if (!is_dir("/dev")) return Status::ok();
  std::vector<std::pair<const char*, UniqueFd>> nodes;
  for (const char* name : kDevices) {
    const std::string path = std::string("/dev/") + name;
    UniqueFd fd(::open(path.c_str(), O_PATH | O_NOFOLLOW | O_CLOEXEC));
    if (fd.valid()) nodes.emplace_back(name, std::move(fd));  // a host without one: the task has none either
  }
  if (::mount("tmpfs", "/dev", "tmpfs", MS_NOSUID | MS_NOEXEC, "size=64k,nr_inodes=64,mode=0755") != 0) {
    return Status::error(errno_text("private /dev: mounting a tmpfs on /dev"));
  }
  for (const auto& [name, fd] : nodes) {
    const std::string path = std::string("/dev/") + name;
    const std::string source = "/proc/self/fd/" + std::to_string(fd.get());
    if (auto s = make_mount_point(path, false); !s) return Status::error("private /dev: " + s.message());
    if (::mount(source.c_str(), path.c_str(), nullptr, MS_BIND, nullptr) != 0) {
      return Status::error(errno_text("private /dev: binding " + path));
    }
  }
  for (const char* dir : {"/dev/shm", "/dev/pts"}) {
    if (::mkdir(dir, 0755) != 0) return Status::error(errno_text(std::string("private /dev: mkdir ") + dir));
  }
  // A host that refuses a devpts instance here (a container without the
  // right) leaves the task without terminals, not without a /dev: a task
  // needs no pty, and none of the host's is ever its.
  const std::string pts_options = "newinstance,ptmxmode=0666,mode=0620,max=" + std::to_string(kPrivatePtys);
  const bool ptys = ::mount("devpts", "/dev/pts", "devpts", MS_NOSUID | MS_NOEXEC, pts_options.c_str()) == 0;
  for (const auto& [target, link] : {std::pair{"pts/ptmx", "/dev/ptmx"}, {"/proc/self/fd", "/dev/fd"},
                                     {"/proc/self/fd/0", "/dev/stdin"}, {"/proc/self/fd/1", "/dev/stdout"},
                                     {"/proc/self/fd/2", "/dev/stderr"}}) {
    if (!ptys && std::string_view(link) == "/dev/ptmx") continue;
    if (::symlink(target, link) != 0) return Status::error(errno_text(std::string("private /dev: symlink ") + link));
  }
  // As read-only as the host's /dev was in the read-only view: nothing new
  // in it but what is mounted on it (/dev/shm comes next).
  if (::mount(nullptr, "/dev", nullptr, MS_REMOUNT | MS_RDONLY | MS_NOSUID | MS_NOEXEC, "size=64k,nr_inodes=64,mode=0755") != 0) {
    return Status::error(errno_text("private /dev: making /dev read-only"));
  }
  return Status::ok();
}

// The payload file's directory (shared/task_input.h), inside the private
// /tmp: a tmpfs of its own, so that a payload up to the payload limit fits
// whatever the policy's `tmp` size, and nr_inodes=2 (its root and one
// file), so that the task cannot use it as more room beside /tmp: one file,
// which RLIMIT_FSIZE bounds once the payload is in it. Its root is root's
// and sticky, so the task's uid makes the file and cannot remove the
// directory or mount point. A host without /tmp: no directory, and tasks
// get the payload on fd 3 (child_runtime.cpp).
Status set_up_payload_dir() {
  if (!is_dir("/tmp")) return Status::ok();
  const std::string dir(kPayloadDir);
  if (::mkdir(dir.c_str(), 0755) != 0 && errno != EEXIST) return Status::error(errno_text("payload dir: mkdir " + dir));
  const std::string options = "size=" + std::to_string(kMaxPayloadBytes) + ",nr_inodes=2,mode=1777";
  if (::mount("tmpfs", dir.c_str(), "tmpfs", MS_NOSUID | MS_NODEV, options.c_str()) != 0) {
    return Status::error(errno_text("payload dir: mounting a tmpfs on " + dir));
  }
  return Status::ok();
}

// In a mount namespace just unshared: the tmpfs mounts and the binds.
Status set_up_private_dirs(const Isolation& isolation, const std::vector<std::string>& keep_visible, bool payload_dir) {
  // Nothing mounted here reaches the zygote's namespace or the host.
  if (::mount(nullptr, "/", nullptr, MS_REC | MS_PRIVATE, nullptr) != 0) {
    return Status::error(errno_text("private tmp: making mounts private"));
  }
  // What must stay visible, opened while it still is, and in this namespace
  // (a bind's source must be a mount of the caller's own namespace).
  // The policy's writable paths under these directories come back
  // read-write.
  struct Kept {
    std::string path;
    UniqueFd fd;
    bool directory = false;
    bool writable = false;
  };
  std::vector<Kept> kept;
  auto keep = [&kept](const std::string& path, bool writable, bool no_symlinks = false) {
    // A shared path was checked (as the tasks' uid) before the run; opened
    // now as root, a symlink put there since would lead anywhere root may go.
    open_how how{};
    how.flags = O_PATH | O_CLOEXEC;
    how.resolve = RESOLVE_NO_SYMLINKS;
    UniqueFd fd(no_symlinks ? static_cast<int>(::syscall(SYS_openat2, AT_FDCWD, path.c_str(), &how, sizeof how))
                            : ::open(path.c_str(), O_PATH | O_CLOEXEC));
    // A kernel before 5.6 has no openat2: the last component, at least,
    // is not followed (the supervisor refused a share through a symlink).
    if (no_symlinks && !fd.valid() && errno == ENOSYS) fd.reset(::open(path.c_str(), O_PATH | O_NOFOLLOW | O_CLOEXEC));
    if (!fd.valid()) return;  // gone meanwhile: the task will say so itself
    struct stat st {};
    if (::fstat(fd.get(), &st) != 0) return;
    kept.push_back({path, std::move(fd), S_ISDIR(st.st_mode), writable});
  };
  // The policy's shared paths there (--share) come back read-only; what the
  // command line names, read-only too, unless a writable or shared path
  // already shows it (a bind inside a read-only one could not make its
  // mount point).
  // Writable ones as shared ones: opened as root, a symlink put there (a
  // /tmp anyone may write) would bind whatever root may reach, read-write.
  for (const std::string& path : isolation.writable) {
    if (under_private_dir(path)) keep(path, true, true);
  }
  for (const std::string& path : isolation.shared) {
    if (under_private_dir(path)) keep(path, false, true);
  }
  auto shown = [&isolation](const std::string& path) {
    for (const auto* list : {&isolation.writable, &isolation.shared}) {
      for (const std::string& dir : *list) {
        if (path == dir || path.rfind(dir + "/", 0) == 0) return true;
      }
    }
    return false;
  };
  for (const std::string& path : keep_visible) {
    if (!shown(path)) keep(path, false);
  }
  // A parent before what lies inside it (a writable directory inside a
  // shared one, or the reverse): a later bind over a parent would hide the
  // earlier one inside it.
  std::stable_sort(kept.begin(), kept.end(), [](const Kept& x, const Kept& y) {
    return std::count(x.path.begin(), x.path.end(), '/') < std::count(y.path.begin(), y.path.end(), '/');
  });
  if (auto s = set_up_private_dev(); !s) return s;
  // nr_inodes bounds what emptying it costs the slot's next task (see
  // empty_private_dirs): one inode per 4 KiB of its size.
  const std::string options = "size=" + std::to_string(isolation.tmp_bytes) + ",nr_inodes=" +
                              std::to_string(std::max<std::uint64_t>(1024, isolation.tmp_bytes / 4096)) + ",mode=1777";
  for (const char* dir : kPrivateDirs) {
    if (!is_dir(dir)) continue;  // a host without /var/tmp, say
    if (::mount("tmpfs", dir, "tmpfs", MS_NOSUID | MS_NODEV, options.c_str()) != 0) {
      return Status::error(errno_text(std::string("private tmp: mounting a tmpfs on ") + dir));
    }
  }
  for (Kept& k : kept) {
    if (auto s = make_mount_point(k.path, k.directory); !s) return Status::error("private tmp: " + s.message());
    const std::string source = "/proc/self/fd/" + std::to_string(k.fd.get());
    const unsigned long read_only = k.writable ? 0 : MS_RDONLY;
    if (::mount(source.c_str(), k.path.c_str(), nullptr, MS_BIND | MS_REC, nullptr) != 0 ||
        ::mount(nullptr, k.path.c_str(), nullptr, MS_REMOUNT | MS_BIND | read_only | MS_NOSUID | MS_NODEV, nullptr) != 0) {
      return Status::error(errno_text("private tmp: keeping " + k.path + " visible"));
    }
  }
  return payload_dir ? set_up_payload_dir() : Status::ok();
}

// The names in directory `dir_fd` but "." and "..", read with getdents64
// straight from the kernel (from its start, on the fd itself: no DIR, no
// dup). `first_only`: stop at the first name, which answers "anything
// left?" in one listing. An entry cannot hide from it (a name like "..." or
// ".x" is an entry); when the listing fails, `failed` says so.
std::vector<std::string> list_names(int dir_fd, bool first_only, bool& failed) {
  std::vector<std::string> names;
  failed = ::lseek(dir_fd, 0, SEEK_SET) != 0;
  alignas(8) char buf[4096];
  while (!failed) {
    const ssize_t n = ::getdents64(dir_fd, buf, sizeof buf);
    if (n <= 0) {
      failed = n < 0;
      break;
    }
    for (ssize_t off = 0; off < n;) {
      const auto* e = reinterpret_cast<const dirent64*>(buf + off);
      off += e->d_reclen;
      if (std::strcmp(e->d_name, ".") == 0 || std::strcmp(e->d_name, "..") == 0) continue;
      names.emplace_back(e->d_name);
      if (first_only) return names;
    }
  }
  return names;
}

// Removes what `root_fd` holds, as the task's uid, however deep: the walk
// goes down by name and back up by "..", holding two descriptors at most
// and, for each level on the way down, the names it listed there (a tree
// 100 000 levels deep needs no more descriptors than one level; a recursion
// with a descriptor per level ran out of them, and one capped at 64 levels
// left a deeper tree behind, failing every later task of the slot). Each
// entry is looked at once, so the walk ends whatever a survivor writes
// meanwhile (what it adds is found by the check after it). Never follows a
// symlink, never leaves the file system `dev` (a bind's target is the
// host's: a writable path's contents are not ours to remove). What the uid
// may not remove stays (the mount points made as root).
void empty_directory(int root_fd, dev_t dev, const char* unremovable) {
  struct Level {
    std::string name;                 // in the level above ("" for the root)
    ino_t ino = 0;                    // this directory's inode
    std::vector<std::string> names;   // what it held when it was listed
    std::size_t next = 0;
  };
  UniqueFd cur(::fcntl(root_fd, F_DUPFD_CLOEXEC, 0));
  struct stat root {};
  if (!cur.valid() || ::fstat(cur.get(), &root) != 0) return;
  bool failed = false;
  std::vector<Level> way;
  way.push_back({"", root.st_ino, list_names(cur.get(), false, failed), 0});
  while (!way.empty()) {
    Level& here = way.back();
    if (here.next < here.names.size()) {
      const std::string& name = here.names[here.next++];
      if (unremovable != nullptr && way.size() == 1 && name == unremovable) continue;
      struct stat st {};
      if (::fstatat(cur.get(), name.c_str(), &st, AT_SYMLINK_NOFOLLOW) != 0 || st.st_dev != dev) continue;
      if (!S_ISDIR(st.st_mode)) {
        ::unlinkat(cur.get(), name.c_str(), 0);
        continue;
      }
      if (::unlinkat(cur.get(), name.c_str(), AT_REMOVEDIR) == 0) continue;  // empty already
      // A directory the previous task made unreadable or unwritable (chmod
      // 000) would keep its contents: its owner (this uid) may open it up.
      ::fchmodat(cur.get(), name.c_str(), 0700, 0);
      UniqueFd sub(::openat(cur.get(), name.c_str(), O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC));
      struct stat again {};
      if (!sub.valid() || ::fstat(sub.get(), &again) != 0 || again.st_dev != dev || again.st_ino != st.st_ino) continue;
      std::vector<std::string> inside = list_names(sub.get(), false, failed);
      cur = std::move(sub);
      way.push_back({name, st.st_ino, std::move(inside), 0});
      continue;
    }
    if (way.size() == 1) return;  // the root itself stays
    // Back up, and remove the directory just emptied (if anything stayed
    // in it, rmdir fails and it stays for the check to name).
    UniqueFd parent(::openat(cur.get(), "..", O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC));
    const std::string emptied = here.name;
    way.pop_back();
    struct stat up {};
    if (!parent.valid() || ::fstat(parent.get(), &up) != 0 || up.st_dev != dev || up.st_ino != way.back().ino) {
      return;  // moved meanwhile: the check after the walk says what is left
    }
    ::unlinkat(parent.get(), emptied.c_str(), AT_REMOVEDIR);
    cur = std::move(parent);
  }
}

// A fault for the tests of what follows a slot that cannot be emptied
// (tests/e2e/slot_cleanup_test.cpp): a leftover of this name at the top of
// a private dir is treated as one the uid may not remove. No task can
// provoke that on its own (its slot's uid owns all it makes); the
// supervisor passes the variable through only when it has it
// (supervisor/exec/sandbox_env.cpp). It can only make emptying fail. Read
// when the program starts: a child clears its environment before it empties.
const std::string g_unremovable_for_tests = [] {
  const char* v = std::getenv(kUnremovableForTestsEnv);
  return std::string(v != nullptr ? v : "");
}();

}  // namespace

Status enter_private_tmp(const Isolation& isolation, const std::vector<std::string>& keep_visible, bool payload_dir) {
  if (::unshare(CLONE_NEWNS) != 0) return Status::error(errno_text("private tmp: unshare(CLONE_NEWNS)"));
  if (auto s = set_up_private_dirs(isolation, keep_visible, payload_dir); !s) return s;
  if (::chdir("/tmp") != 0) return Status::error(errno_text("private tmp: chdir /tmp"));
  return Status::ok();
}

Expected<SlotNamespace> make_slot_namespace(const Isolation& isolation, const std::vector<std::string>& keep_visible,
                                            bool payload_dir) {
  int pipe_fds[2];
  if (::pipe2(pipe_fds, O_CLOEXEC) != 0) return Error{errno_text("private tmp: pipe2")};
  UniqueFd read_end(pipe_fds[0]), write_end(pipe_fds[1]);
  const pid_t pid = ::fork();
  if (pid < 0) return Error{errno_text("private tmp: fork")};
  if (pid == 0) {
    // The namespace's first process: sets it up, says so, and waits to be
    // killed; the namespace lives on in the fd the parent opens meanwhile.
    read_end.reset();
    std::string answer = "ok";
    if (::unshare(CLONE_NEWNS) != 0) {
      answer = errno_text("private tmp: unshare(CLONE_NEWNS)");
    } else if (auto s = set_up_private_dirs(isolation, keep_visible, payload_dir); !s) {
      answer = s.message();
    }
    (void)!::write(write_end.get(), answer.data(), answer.size());
    write_end.reset();
    for (;;) ::pause();
  }
  write_end.reset();
  std::string answer;
  char buf[512];
  for (ssize_t n; (n = ::read(read_end.get(), buf, sizeof buf)) != 0;) {
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) break;
    answer.append(buf, static_cast<std::size_t>(n));
    if (answer == "ok") break;
  }
  SlotNamespace slot;
  if (answer == "ok") slot.ns.reset(::open(("/proc/" + std::to_string(pid) + "/ns/mnt").c_str(), O_RDONLY | O_CLOEXEC));
  const int open_errno = errno;
  // Its payload dir, reached through the first process's root: a path in
  // the new namespace, which the zygote itself never joins.
  if (slot.ns.valid() && payload_dir) {
    slot.payload_dir.reset(::open(("/proc/" + std::to_string(pid) + "/root" + std::string(kPayloadDir)).c_str(),
                                  O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC));
  }
  ::kill(pid, SIGKILL);
  while (::waitpid(pid, nullptr, 0) < 0 && errno == EINTR) {
  }
  if (answer != "ok") return Error{answer.empty() ? "private tmp: the namespace's first process died" : answer};
  if (!slot.ns.valid()) return Error{"private tmp: opening the namespace: " + std::string(std::strerror(open_errno))};
  return slot;
}

Status join_private_tmp(int ns_fd) {
  if (::setns(ns_fd, CLONE_NEWNS) != 0) return Status::error(errno_text("private tmp: setns"));
  if (::chdir("/tmp") != 0) return Status::error(errno_text("private tmp: chdir /tmp"));
  return Status::ok();
}

Status empty_private_dirs() {
  const char* const unremovable = g_unremovable_for_tests.empty() ? nullptr : g_unremovable_for_tests.c_str();
  // The payload dir is a mount of its own, which the walk of /tmp does not
  // enter: emptied as one more directory.
  static const std::string payload_dir(kPayloadDir);
  static const std::vector<const char*> dirs = [] {
    std::vector<const char*> v(std::begin(kPrivateDirs), std::end(kPrivateDirs));
    v.push_back(payload_dir.c_str());
    return v;
  }();
  for (const char* dir : dirs) {
    const int fd = ::open(dir, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
    if (fd < 0) continue;
    // Most tasks leave nothing: then one listing is the whole cost (open,
    // lseek, 2 getdents64, close per directory, where the walk and the
    // check after it made 15 syscalls; strace -f of exec tasks).
    bool failed = false;
    if (list_names(fd, true, failed).empty() && !failed) {
      ::close(fd);
      continue;
    }
    struct stat st {};
    if (::fstat(fd, &st) == 0) empty_directory(fd, st.st_dev, unremovable);
    // Whatever the uid could not remove must be root's own (the mount
    // points of what stays visible): anything else left is refused.
    std::string left;
    const std::vector<std::string> names = list_names(fd, false, failed);
    if (failed) {
      ::close(fd);
      return Status::error(std::string("private tmp: cannot list ") + dir + " after emptying it");
    }
    for (const std::string& name : names) {
      struct stat entry {};
      if (::fstatat(fd, name.c_str(), &entry, AT_SYMLINK_NOFOLLOW) != 0) continue;
      if (entry.st_uid != 0 && entry.st_dev == st.st_dev) left = name;
    }
    ::close(fd);
    if (!left.empty()) {
      return Status::error(std::string("private tmp: cannot remove ") + dir + "/" + left +
                           ", left by the slot's previous task");
    }
  }
  return Status::ok();
}

void remove_payload_files(int payload_dir_fd) {
  bool failed = false;
  for (const std::string& name : list_names(payload_dir_fd, false, failed)) {
    if (::unlinkat(payload_dir_fd, name.c_str(), 0) != 0 && errno == EISDIR) {
      ::unlinkat(payload_dir_fd, name.c_str(), AT_REMOVEDIR);  // empty: the dir holds one inode
    }
  }
}

Expected<UniqueFd> create_payload_file(const std::string& name) {
  const std::string path = std::string(kPayloadDir) + "/" + name;
  UniqueFd fd(::open(path.c_str(), O_RDWR | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0644));
  if (!fd.valid()) return Error{errno_text("payload file: creating " + path)};
  return fd;
}

bool has_payload_dir() {
  struct stat dir {}, tmp {};
  // Its own mount, or it is only a directory a host happens to have.
  return ::stat(std::string(kPayloadDir).c_str(), &dir) == 0 && S_ISDIR(dir.st_mode) && ::stat("/tmp", &tmp) == 0 &&
         dir.st_dev != tmp.st_dev;
}


}  // namespace pillbox::sandbox
