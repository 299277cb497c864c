#include "sandbox/plugin_privileges.h"

#include <fcntl.h>
#include <poll.h>
#include <sched.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstring>
#include <filesystem>
#include <string>
#include <vector>

#include "sandbox/handler.h"
#include "sandbox/namespaces.h"
#include "sandbox/privileges.h"
#include "sandbox/rlimits.h"
#include "sandbox/seccomp_filter.h"
#include "shared/control.h"
#include "shared/uid_sweep.h"
#include "shared/unique_fd.h"

namespace pillbox::sandbox {

bool load_handler_in_child(const ChildConfig& config) {
  return config.drop_privileges && config.handler.starts_with("plugin:");
}

namespace {

// In the loader, before the plugin: fds 0-2 on /dev/null, `keep` as fd 3,
// nothing else. The loader is forked from the zygote, whose fds 0 and 1 are
// its control pipes to the supervisor, or from spawn mode's --check, which
// holds the supervisor's own stdin and stdout (the task list, the --json
// records): a plugin that prints or reads there while it loads (or a daemon
// it forks, which keeps them for as long as it lives) must reach none of it.
bool isolate_fds(int keep) {
  const int devnull = ::open("/dev/null", O_RDWR | O_CLOEXEC);
  if (devnull < 0) return false;
  for (int fd = 0; fd <= 2; ++fd) {
    if (::dup2(devnull, fd) < 0) return false;
  }
  if (keep != 3 && ::dup2(keep, 3) < 0) return false;
  ::close_range(4, ~0u, 0);
  return true;
}

// Why the calling uid could make `path` name other code than it names now:
// a directory on the way it may write (unless sticky, with the entry not
// its own), or the file itself. "" when it cannot. Both the path as given
// and the file it resolves to are walked.
std::string replaceable_by_caller(const std::string& path) {
  namespace fs = std::filesystem;
  std::error_code ec;
  std::vector<fs::path> ways{fs::absolute(path, ec).lexically_normal()};
  if (fs::path real = fs::canonical(path, ec); !ec) ways.push_back(std::move(real));
  for (const fs::path& way : ways) {
    fs::path at = way.root_path();
    for (const fs::path& part : way.relative_path()) {
      const fs::path dir = at;
      at /= part;
      if (::access(dir.c_str(), W_OK) != 0) continue;
      struct stat d {}, entry {};
      const bool sticky = ::stat(dir.c_str(), &d) == 0 && (d.st_mode & S_ISVTX);
      const bool own = ::lstat(at.c_str(), &entry) == 0 && entry.st_uid == ::getuid();
      if (!sticky || own) return "it may write directory " + dir.string();
    }
    if (::access(at.c_str(), W_OK) == 0) return "it may write " + at.string();
  }
  return {};
}

// As in a task's child: no new namespace for the plugin's loading code.
Status load_namespace_filter(const ChildConfig& config) {
  if (!config.policy.seccomp.enabled) return Status::ok();
  auto filter = compile_namespace_filter();
  if (!filter) return Status::error(filter.error());
  if (auto loaded = load_filter(*filter); !loaded) return Status::error(loaded.error());
  return Status::ok();
}

}  // namespace

Status check_handler_unprivileged(const ChildConfig& config) {
  const Isolation& iso = config.policy.isolation;
  const std::uint32_t pool_uid = config.check_uid != 0 ? config.check_uid : iso.uid_pool_first;
  const std::uint32_t uid = iso.uid_pool_size > 0 ? pool_uid : config.sandbox_uid;
  const std::uint32_t gid = iso.uid_pool_size > 0 ? pool_uid : config.sandbox_gid;
  int fds[2];
  if (::pipe2(fds, O_CLOEXEC) != 0) return Status::error(std::string("pipe2: ") + std::strerror(errno));
  UniqueFd read_end(fds[0]), write_end(fds[1]);
  const pid_t parent = ::getpid();
  // A PID namespace of its own too: whatever the plugin starts while it
  // loads dies with the check (the first process of a PID namespace takes
  // every other one with it). The raw clone, as in the fork server: glibc's
  // fork cannot ask for one. A host that refuses them gets a plain fork.
  bool own_pid_namespace = true;
  pid_t pid = static_cast<pid_t>(::syscall(SYS_clone, CLONE_NEWPID | SIGCHLD, 0, nullptr, nullptr, 0));
  if (pid < 0 && (errno == EPERM || errno == EINVAL || errno == ENOSPC)) {
    own_pid_namespace = false;
    pid = ::fork();
  }
  if (pid < 0) return Status::error(std::string("fork: ") + std::strerror(errno));
  if (pid == 0) {
    read_end.reset();
    constexpr int kReportFd = 3;
    if (!isolate_fds(write_end.get())) _exit(2);
    // Confined like a child before its seccomp filter, which is where the
    // plugin's code runs in a task: the policy's namespaces (no network, the
    // read-only view), its limits, an unprivileged uid. (Best effort for the
    // namespaces: a host that refuses them refuses them to the tasks too.)
    (void)enter_namespaces(config.policy.isolation);
    std::string error;
    bool setup_failed = true;  // until the handler itself is tried
    if (auto s = apply_rlimits(config.policy.limits, current_address_space_bytes(), false); !s) {
      error = "cannot check the plugin: " + s.message();
    } else if (auto s1 = drop_privileges(uid, gid); !s1) {
      error = "cannot check the plugin: cannot drop to uid " + std::to_string(uid) + ": " + s1.message();
    } else if (auto s2 = set_no_new_privs(); !s2) {
      error = "cannot check the plugin: " + s2.message();
    } else if (auto s3 = load_namespace_filter(config); !s3) {
      error = "cannot check the plugin: " + s3.message();
    } else {
      // Die with the process that checks (the uid change cleared it).
      ::prctl(PR_SET_PDEATHSIG, SIGKILL);
      // (In a PID namespace of its own, its parent is outside: pid 0 here.)
      if (::getppid() != (own_pid_namespace ? 0 : parent)) _exit(2);
      setup_failed = false;
      const std::string path = config.handler.substr(std::string_view("plugin:").size());
      // Every task's child loads the plugin anew, from this path. If a task's
      // uid could replace it (a symlink or file in a directory it may write),
      // one task could change the code every later task runs, and what is
      // checked here would not be what the tasks load.
      if (const std::string why = replaceable_by_caller(path); !why.empty()) {
        error = "plugin " + path + " could be replaced by uid " + std::to_string(uid) + ", a task's uid (" + why +
                "): each task loads it anew, so one task could change the code every later task runs; install it "
                "where only root may write";
      } else if (auto handler = make_handler(config.handler, config.args); !handler) {
        error = handler.error();
        if (::access(path.c_str(), R_OK) != 0 && errno == EACCES) {
          error += " (as uid " + std::to_string(uid) +
                   ": plugins are loaded only after a task dropped root, so the file and every directory above it "
                   "must be readable by that uid)";
        }
      }
    }
    (void)write_all(kReportFd, error);
    _exit(error.empty() ? 0 : setup_failed ? 2 : 1);
  }
  write_end.reset();
  // The loader's exit ends the wait, not the end of the pipe: a process the
  // plugin forked while loading keeps a copy of the pipe for as long as it
  // lives (it is killed below).
  UniqueFd exited(static_cast<int>(::syscall(SYS_pidfd_open, pid, 0)));
  ::fcntl(read_end.get(), F_SETFL, O_NONBLOCK);
  // A plugin whose init never returns must not hang the run's start: it gets
  // the task's wall-clock limit (its CPU limit is already set), then it is killed.
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::milliseconds(config.policy.limits.wall_ms);
  std::string error;
  bool timed_out = false;
  bool done = false;
  char buf[4096];
  while (!done) {
    const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - std::chrono::steady_clock::now());
    pollfd p[2] = {{read_end.get(), POLLIN, 0}, {exited.get(), POLLIN, 0}};
    const int ready = ::poll(p, exited.valid() ? 2 : 1, static_cast<int>(std::max<std::int64_t>(left.count(), 0)));
    if (ready < 0 && errno == EINTR) continue;
    if (ready < 0) break;
    if (ready == 0) {
      timed_out = true;
      ::kill(pid, SIGKILL);
      break;
    }
    // Once the loader is gone, what it wrote is all in the pipe.
    done = exited.valid() && (p[1].revents & POLLIN);
    for (;;) {
      const ssize_t n = ::read(read_end.get(), buf, sizeof buf);
      if (n < 0 && errno == EINTR) continue;
      if (n == 0) done = true;  // every copy of the write end is closed
      if (n <= 0) break;
      if (error.size() < 8192) error.append(buf, static_cast<std::size_t>(n));
    }
  }
  int status = 0;
  while (::waitpid(pid, &status, 0) < 0 && errno == EINTR) {
  }
  // Whatever the plugin left running as that uid (a daemon forked in its
  // constructor or init, with no seccomp filter yet) dies now: outside any
  // task's cgroup and, in zygote mode, outside the PID namespace the
  // children's own kill(-1) reaches, nothing else would find it before the
  // end of the run. From root, so that nothing of that uid can stop it.
  if (config.drop_privileges) sweep_uids(&uid, 1, 1000);
  // Exit 1: the handler failed to load (its message says why); anything else
  // is the check's own failure.
  const ErrorCode code = WIFSIGNALED(status) || (WIFEXITED(status) && WEXITSTATUS(status) == 1) ? ErrorCode::kConfig
                                                                                                 : ErrorCode::kSetup;
  if (timed_out) {
    return Status::error("plugin " + config.handler.substr(7) + " did not finish loading (its constructors and init) " +
                             "within the wall-clock limit of " + std::to_string(config.policy.limits.wall_ms) + " ms",
                         ErrorCode::kConfig);
  }
  if (WIFSIGNALED(status)) {
    return Status::error("plugin " + config.handler.substr(7) + " killed its loader with signal " +
                             std::to_string(WTERMSIG(status)) + " while loading (its constructors or init, as uid " +
                             std::to_string(uid) + ")",
                         code);
  }
  if (!error.empty()) return Status::error(error, code);
  if (WEXITSTATUS(status) != 0) {
    return Status::error("plugin " + config.handler.substr(7) + " could not be loaded", code);
  }
  return Status::ok();
}

}  // namespace pillbox::sandbox
