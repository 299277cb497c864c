#include "sandbox/plugin_privileges.h"

#include <fcntl.h>
#include <poll.h>
#include <sched.h>
#include <signal.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstring>
#include <string>

#include "sandbox/handler.h"
#include "sandbox/namespaces.h"
#include "sandbox/privileges.h"
#include "sandbox/rlimits.h"
#include "shared/control.h"
#include "shared/unique_fd.h"

namespace pillbox::sandbox {

bool load_handler_in_child(const ChildConfig& config) {
  return config.drop_privileges && config.handler.starts_with("plugin:");
}

Status check_handler_unprivileged(const ChildConfig& config, bool& config_error) {
  config_error = false;
  // The policy's user (nobody), not a uid of the pool: a pool uid this run
  // has not claimed may be another run's, whose next task kills every
  // process of its uid (sandbox/child_runtime.cpp). Either is an
  // unprivileged uid outside the file's owner and group, so the answer is the same.
  const std::uint32_t uid = config.sandbox_uid;
  const std::uint32_t gid = config.sandbox_gid;
  int fds[2];
  if (::pipe2(fds, O_CLOEXEC) != 0) return Status::error(std::string("pipe2: ") + std::strerror(errno));
  UniqueFd read_end(fds[0]), write_end(fds[1]);
  // A PID namespace of its own: whatever the plugin starts while it loads
  // dies with the check (the first process of a PID namespace takes every
  // other one with it). The raw clone, as in the fork server: glibc's fork
  // cannot ask for one.
  // A host that refuses PID namespaces (some containers) gets a plain fork.
  pid_t pid = static_cast<pid_t>(::syscall(SYS_clone, CLONE_NEWPID | SIGCHLD, 0, nullptr, nullptr, 0));
  if (pid < 0 && (errno == EPERM || errno == EINVAL || errno == ENOSPC)) pid = ::fork();
  if (pid < 0) return Status::error(std::string("fork: ") + std::strerror(errno));
  if (pid == 0) {
    read_end.reset();
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
    } else {
      setup_failed = false;
      if (auto handler = make_handler(config.handler, config.args); !handler) {
        error = handler.error();
        const std::string path = config.handler.substr(std::string_view("plugin:").size());
        if (::access(path.c_str(), R_OK) != 0 && errno == EACCES) {
          error += " (as uid " + std::to_string(uid) +
                   ": plugins are loaded only after a task dropped root, so the file and every directory above it "
                   "must be readable by that uid)";
        }
      }
    }
    (void)write_all(write_end.get(), error);
    _exit(error.empty() ? 0 : setup_failed ? 2 : 1);
  }
  write_end.reset();
  // A plugin whose init never returns must not hang the run's start: it gets
  // the task's wall-clock limit (its CPU limit is already set), then it is killed.
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::milliseconds(config.policy.limits.wall_ms);
  std::string error;
  bool timed_out = false;
  char buf[4096];
  for (;;) {
    const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - std::chrono::steady_clock::now());
    pollfd p{read_end.get(), POLLIN, 0};
    const int ready = ::poll(&p, 1, static_cast<int>(std::max<std::int64_t>(left.count(), 0)));
    if (ready < 0 && errno == EINTR) continue;
    if (ready == 0) {
      timed_out = true;
      ::kill(pid, SIGKILL);
      break;
    }
    const ssize_t n = ::read(read_end.get(), buf, sizeof buf);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) break;
    if (error.size() < 8192) error.append(buf, static_cast<std::size_t>(n));
  }
  int status = 0;
  while (::waitpid(pid, &status, 0) < 0 && errno == EINTR) {
  }
  // Exit 1: the handler failed to load (its message says why); anything else
  // is the check's own failure.
  config_error = WIFSIGNALED(status) || (WIFEXITED(status) && WEXITSTATUS(status) == 1);
  if (timed_out) {
    config_error = true;
    return Status::error("plugin " + config.handler.substr(7) + " did not finish loading (its constructors and init) " +
                         "within the wall-clock limit of " + std::to_string(config.policy.limits.wall_ms) + " ms");
  }
  if (WIFSIGNALED(status)) {
    return Status::error("plugin " + config.handler.substr(7) + " killed its loader with signal " +
                         std::to_string(WTERMSIG(status)) + " while loading (its constructors or init, as uid " +
                         std::to_string(uid) + ")");
  }
  if (!error.empty()) return Status::error(error);
  if (WEXITSTATUS(status) != 0) return Status::error("plugin " + config.handler.substr(7) + " could not be loaded");
  return Status::ok();
}

}  // namespace pillbox::sandbox
