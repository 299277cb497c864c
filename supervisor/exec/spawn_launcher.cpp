// SpawnLauncher: fork+exec of `pillbox-sandbox --child` per task with
// Boost.Process. The supervisor is the parent: it watches each child through
// a pidfd and collects its wait status, rusage and streams itself. It also
// becomes a child subreaper and reaps every exited child process, so a
// program embedding run_tasks() in spawn mode should not wait for children
// of its own at the same time.
#include <fcntl.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include <boost/process.hpp>
#include <boost/process/extend.hpp>
#include <cerrno>
#include <chrono>
#include <cstring>
#include <map>

#include "shared/child_streams.h"
#include "shared/crash_report.h"
#include "shared/process_group.h"
#include "shared/seccomp_notify.h"
#include "supervisor/exec/launcher.h"
#include "supervisor/exec/sandbox_env.h"

namespace pillbox {

namespace bp = boost::process;

namespace {

constexpr int kBootstrapFd = 3;

int pidfd_open(pid_t pid) { return static_cast<int>(::syscall(SYS_pidfd_open, pid, 0)); }

}  // namespace

class SpawnLauncher final : public Launcher {
 public:
  explicit SpawnLauncher(LauncherSettings settings)
      : settings_(std::move(settings)), environment_(sandbox_environment(LaunchMode::kSpawn)) {}

  ~SpawnLauncher() override {
    for (auto& [fd, c] : children_) {
      if (!c.exited) {  // not reaped yet: its pid is still its own
        kill_task_group(c.pid);
        ::waitpid(c.pid, nullptr, 0);
      }
      ::close(fd);
    }
  }

  // Validates the configuration once, in a child that prepares the handler
  // and filter exactly like each task's child will, so a bad handler is one
  // clear error instead of one sandbox-error per task.
  Status start() override {
    if (::access(settings_.sandbox_binary.c_str(), X_OK) != 0) {
      return Status::error("cannot execute " + settings_.sandbox_binary + ": " + std::strerror(errno));
    }
    int boot[2];
    if (::pipe2(boot, O_CLOEXEC) != 0) return Status::error(std::string("pipe2: ") + std::strerror(errno));
    UniqueFd boot_read(boot[0]), boot_write(boot[1]);
    ControlMessage config;
    config.type = ControlType::kConfig;
    config.config = settings_.config;
    if (auto s = write_all(boot_write.get(), encode_control(config)); !s) return s;
    boot_write.reset();
    std::string errors;
    std::vector<std::string> warnings;
    int code = -1;
    try {
      const int boot_fd = boot_read.get();
      bp::ipstream err;
      // Not the supervisor's stdin and stdout (the task list, the records):
      // the check loads a plugin, in a process of its own but forked from
      // this one (sandbox/plugin_privileges.h).
      bp::child c(settings_.sandbox_binary, "--check", bp::std_in < bp::null, bp::std_out > bp::null,
                  bp::std_err > err, environment_,
                  bp::extend::on_exec_setup = [=](auto&) {
                    if (boot_fd == kBootstrapFd) ::fcntl(boot_fd, F_SETFD, 0);  // dup2 onto itself keeps CLOEXEC
                    else ::dup2(boot_fd, kBootstrapFd);
                  });
      boot_read.reset();
      std::string line;
      while (std::getline(err, line)) {
        if (line.rfind("warning: ", 0) == 0) warnings.push_back(line.substr(9));
        else errors += (errors.empty() ? "" : "; ") + line;
      }
      c.wait();
      code = c.exit_code();
    } catch (const std::exception& e) {
      return Status::error("cannot run " + settings_.sandbox_binary + ": " + e.what());
    }
    if (code != 0) {
      return Status::error(errors.empty() ? "configuration check failed" : errors,
                           code == kCheckExitConfigInvalid ? ErrorCode::kConfig : ErrorCode::kSetup);
    }
    // Processes a task leaves behind are reparented to us, not to init, so
    // they are reaped before the next task starts (see collect()).
    ::prctl(PR_SET_CHILD_SUBREAPER, 1);
    isolation_ = {"per child (spawn mode)"};
    warnings_ = std::move(warnings);
    return Status::ok();
  }

  Status launch(const TaskTicket& ticket) override {
    auto streams = open_child_streams(settings_.config.exec_mode());
    if (!streams) return fork_failed(ticket.seq, streams.error());
    int boot[2];
    if (::pipe2(boot, O_CLOEXEC) != 0) return fork_failed(ticket.seq, std::string("pipe2: ") + std::strerror(errno));
    UniqueFd boot_read(boot[0]), boot_write(boot[1]);
    const int crash_fd = streams->crash_write.get();
    const int listener_fd = streams->listener_socket_child.get();
    const int out_fd = streams->stdout_file.get();
    const int err_fd = streams->stderr_file.get();
    const int boot_fd = boot_read.get();
    pid_t pid = -1;
    try {
      // Runs in the forked child before exec: put the streams at their fixed fds.
      // Sources are first copied above every target so no dup2 clobbers
      // another source; dup2 onto a different fd also clears FD_CLOEXEC.
      auto setup = [=](auto&) {
        const int above = kListenerSocketFd + 1;
        const int boot_tmp = ::fcntl(boot_fd, F_DUPFD_CLOEXEC, above);
        const int crash_tmp = ::fcntl(crash_fd, F_DUPFD_CLOEXEC, above);
        const int listener_tmp = ::fcntl(listener_fd, F_DUPFD_CLOEXEC, above);
        const int out_tmp = out_fd >= 0 ? ::fcntl(out_fd, F_DUPFD_CLOEXEC, above) : -1;
        const int err_tmp = err_fd >= 0 ? ::fcntl(err_fd, F_DUPFD_CLOEXEC, above) : -1;
        ::dup2(boot_tmp, kBootstrapFd);
        ::dup2(crash_tmp, kCrashFd);
        ::dup2(listener_tmp, kListenerSocketFd);
        if (out_tmp >= 0) ::dup2(out_tmp, 1);
        if (err_tmp >= 0) ::dup2(err_tmp, 2);
      };
      bp::child c(settings_.sandbox_binary, "--child", environment_, bp::extend::on_exec_setup = setup);
      pid = c.id();
      c.detach();  // we reap it ourselves (wait4, for rusage)
    } catch (const std::exception& e) {
      return fork_failed(ticket.seq, std::string("spawn ") + settings_.sandbox_binary + ": " + e.what());
    }
    boot_read.reset();
    streams->crash_write.reset();
    streams->listener_socket_child.reset();
    ControlMessage config;
    config.type = ControlType::kConfig;
    config.config = settings_.config;
    ControlMessage fork;
    fork.type = ControlType::kFork;
    fork.ticket = ticket;
    // A child that died before reading gets EPIPE here; its exit is reported anyway.
    const auto old = ::signal(SIGPIPE, SIG_IGN);
    (void)write_all(boot_write.get(), encode_control(config) + encode_control(fork));
    ::signal(SIGPIPE, old);
    const int pidfd = pidfd_open(pid);
    if (pidfd < 0) {
      ::kill(pid, SIGKILL);
      ::waitpid(pid, nullptr, 0);
      return fork_failed(ticket.seq, std::string("pidfd_open: ") + std::strerror(errno));
    }
    ::fcntl(pidfd, F_SETFD, FD_CLOEXEC);
    Child child;
    child.seq = ticket.seq;
    child.pid = pid;
    child.watch = ViolationWatch(std::move(streams->listener_socket));
    child.streams = std::move(*streams);
    children_[pidfd] = std::move(child);
    LaunchEvent ev;
    ev.type = LaunchEvent::Type::kForked;
    ev.seq = ticket.seq;
    ev.pid = pid;
    pending_.push_back(std::move(ev));
    return Status::ok();
  }

  // Only a child not yet reaped: a reaped pid may belong to someone else now.
  void kill(pid_t pid) override {
    for (const auto& [fd, c] : children_) {
      if (c.pid == pid && !c.exited) kill_task_group(pid);
    }
  }

  // A pidfd stays readable once its process exited: draining children are
  // not watched (needs_tick wakes the dispatcher for them instead).
  std::vector<int> watch_fds() const override {
    std::vector<int> fds;
    for (const auto& [fd, c] : children_) {
      if (c.exited) continue;
      fds.push_back(fd);
      if (c.watch.fd() >= 0) fds.push_back(c.watch.fd());
    }
    return fds;
  }

  std::vector<LaunchEvent> collect() override {
    std::vector<LaunchEvent> events = std::move(pending_);
    pending_.clear();
    // A denied syscall: the kernel says so; the task dies at once.
    for (auto& [fd, c] : children_) {
      if (c.watch.take() && !c.exited) kill_task_group(c.pid);
    }
    // Every exited child: our tasks (their group is killed first, see
    // reap_children) and orphans of finished tasks reparented to us.
    const auto find_task = [this](pid_t pid) -> Child* {
      for (auto& [fd, c] : children_) {
        if (c.pid == pid && !c.exited) return &c;
      }
      return nullptr;
    };
    reap_children([&](pid_t pid) { return find_task(pid) != nullptr; },
                  [&](pid_t pid, int status, const rusage& ru) { record_exit(*find_task(pid), status, ru); });
    const auto now = std::chrono::steady_clock::now();
    for (auto it = children_.begin(); it != children_.end();) {
      Child& c = it->second;
      if (!c.exited || (!drain_process_group(c.pid) && now < c.drain_deadline)) {
        ++it;
        continue;
      }
      LaunchEvent ev;
      ev.type = LaunchEvent::Type::kExited;
      ev.seq = c.seq;
      ev.pid = c.pid;
      c.watch.take();  // a notification that came with the exit
      c.exit.seccomp_watched = c.watch.watched();
      if (const auto& v = c.watch.violation()) {
        c.exit.violation_nr = v->nr;
        c.exit.violation_arch = v->arch;
      }
      ev.exit = std::move(c.exit);
      collect_child_streams(c.streams, ev.exit, settings_.config.policy.limits.output_bytes);
      ::close(it->first);
      it = children_.erase(it);
      events.push_back(std::move(ev));
    }
    return events;
  }

  // While a task's process group drains, wake up even without a pidfd event.
  bool needs_tick() const override {
    for (const auto& [fd, c] : children_) {
      if (c.exited) return true;
    }
    return false;
  }

  const std::vector<std::string>& isolation() const override { return isolation_; }
  const std::vector<std::string>& warnings() const override { return warnings_; }
  std::string describe() const override { return "spawn per task"; }

 private:
  struct Child {
    std::uint64_t seq;
    pid_t pid;
    ChildStreams streams;
    ViolationWatch watch;  // the kernel's word on the task's denied syscalls
    bool exited = false;  // main process reaped; its process group is draining
    ExitReport exit;
    std::chrono::steady_clock::time_point drain_deadline;
  };

  void record_exit(Child& c, int status, const rusage& ru) {
    c.exited = true;
    c.drain_deadline = std::chrono::steady_clock::now() + std::chrono::seconds(2);
    c.exit.seq = c.seq;
    c.exit.pid = c.pid;
    c.exit.wait_status = status;
    c.exit.utime_us = static_cast<std::uint64_t>(ru.ru_utime.tv_sec) * 1'000'000 + static_cast<std::uint64_t>(ru.ru_utime.tv_usec);
    c.exit.stime_us = static_cast<std::uint64_t>(ru.ru_stime.tv_sec) * 1'000'000 + static_cast<std::uint64_t>(ru.ru_stime.tv_usec);
    c.exit.max_rss_kb = static_cast<std::uint64_t>(ru.ru_maxrss);
  }

  Status fork_failed(std::uint64_t seq, std::string why) {
    LaunchEvent ev;
    ev.type = LaunchEvent::Type::kForkFailed;
    ev.seq = seq;
    ev.message = std::move(why);
    pending_.push_back(std::move(ev));
    return Status::ok();
  }

  LauncherSettings settings_;
  const bp::environment environment_;  // built once (supervisor/exec/sandbox_env.h)
  std::map<int, Child> children_;  // by pidfd
  std::vector<LaunchEvent> pending_;
  std::vector<std::string> isolation_;
  std::vector<std::string> warnings_;
};

std::unique_ptr<Launcher> make_spawn_launcher(const LauncherSettings& settings) {
  return std::make_unique<SpawnLauncher>(settings);
}

}  // namespace pillbox
