#include "sandbox/plugin_privileges.h"

#include <fcntl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <string>

#include "sandbox/handler.h"
#include "sandbox/privileges.h"
#include "shared/control.h"
#include "shared/unique_fd.h"

namespace pillbox::sandbox {

bool load_handler_in_child(const ChildConfig& config) {
  return config.drop_privileges && config.handler.starts_with("plugin:");
}

Status check_handler_unprivileged(const ChildConfig& config, bool& config_error) {
  config_error = false;
  const Isolation& iso = config.policy.isolation;
  const std::uint32_t uid = iso.uid_pool_size > 0 ? iso.uid_pool_first : config.sandbox_uid;
  const std::uint32_t gid = iso.uid_pool_size > 0 ? iso.uid_pool_first : config.sandbox_gid;
  int fds[2];
  if (::pipe2(fds, O_CLOEXEC) != 0) return Status::error(std::string("pipe2: ") + std::strerror(errno));
  UniqueFd read_end(fds[0]), write_end(fds[1]);
  const pid_t pid = ::fork();
  if (pid < 0) return Status::error(std::string("fork: ") + std::strerror(errno));
  if (pid == 0) {
    read_end.reset();
    std::string error;
    if (auto s = drop_privileges(uid, gid); !s) {
      error = "cannot drop to uid " + std::to_string(uid) + ": " + s.message();
    } else if (auto s2 = set_no_new_privs(); !s2) {
      error = s2.message();
    } else if (auto handler = make_handler(config.handler, config.args); !handler) {
      error = handler.error();
      const std::string path = config.handler.substr(std::string_view("plugin:").size());
      if (::access(path.c_str(), R_OK) != 0 && errno == EACCES) {
        error += " (as uid " + std::to_string(uid) +
                 ": plugins are loaded only after a task dropped root, so the file and every directory above it "
                 "must be readable by that uid)";
      }
    }
    (void)write_all(write_end.get(), error);
    _exit(error.empty() ? 0 : error.starts_with("cannot drop") ? 2 : 1);
  }
  write_end.reset();
  std::string error;
  char buf[4096];
  for (;;) {
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
