// ZygoteLauncher: one zygote per run (handler + policy), started with
// Boost.Process, talking over its stdin/stdout with the control protocol.
#include <fcntl.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <boost/process.hpp>
#include <cerrno>
#include <cstring>

#include "supervisor/exec/launcher.h"
#include "supervisor/exec/sandbox_env.h"

namespace pillbox {

namespace bp = boost::process;

class ZygoteLauncher final : public Launcher {
 public:
  explicit ZygoteLauncher(LauncherSettings settings)
      : settings_(std::move(settings)),
        reader_(settings_.config.policy.limits.output_bytes + 2 * kMaxCrashBytes + (1u << 20)) {}

  ~ZygoteLauncher() override { stop(); }

  Status start() override {
    try {
      bp::pipe to_zygote, from_zygote;
      const bp::environment env = sandbox_environment(LaunchMode::kZygote);
      child_ = bp::child(settings_.sandbox_binary, "--zygote", bp::std_in < to_zygote, bp::std_out > from_zygote, env);
      // Keep only our ends, so the zygote's exit shows as EOF.
      ::close(to_zygote.native_source());
      to_zygote.assign_source(-1);
      ::close(from_zygote.native_sink());
      from_zygote.assign_sink(-1);
      to_fd_ = to_zygote.native_sink();
      to_zygote.assign_sink(-1);
      from_fd_ = from_zygote.native_source();
      from_zygote.assign_source(-1);
      ::fcntl(to_fd_, F_SETFD, FD_CLOEXEC);
      ::fcntl(from_fd_, F_SETFD, FD_CLOEXEC);
    } catch (const std::exception& e) {
      return Status::error("cannot start the zygote " + settings_.sandbox_binary + ": " + e.what());
    }
    ControlMessage config;
    config.type = ControlType::kConfig;
    config.config = settings_.config;
    if (auto s = write_all(to_fd_, encode_control(config)); !s) return Status::error("zygote: " + s.message());
    // The first answer is READY or FAILED; read it blocking.
    auto answer = read_control_blocking(from_fd_, 1u << 20);
    if (!answer) return Status::error("the zygote exited during setup (" + answer.error() + ")");
    if (answer->type == ControlType::kFailed) return Status::error(answer->message, answer->error_code);
    if (answer->type != ControlType::kReady) return Status::error("zygote: unexpected first message");
    isolation_ = answer->ready.isolation;
    warnings_ = answer->ready.warnings;
    zygote_pid_ = static_cast<pid_t>(answer->ready.pid);
    ::fcntl(from_fd_, F_SETFL, ::fcntl(from_fd_, F_GETFL) | O_NONBLOCK);
    return Status::ok();
  }

  Status launch(const TaskTicket& ticket) override {
    if (to_fd_ < 0) return Status::error("zygote is not running");
    ControlMessage m;
    m.type = ControlType::kFork;
    m.ticket = ticket;
    return write_all(to_fd_, encode_control(m));
  }

  void kill(pid_t pid) override {
    if (to_fd_ < 0) return;
    ControlMessage m;
    m.type = ControlType::kKill;
    m.pid = pid;
    (void)write_all(to_fd_, encode_control(m));
  }

  std::vector<int> watch_fds() const override {
    if (from_fd_ < 0) return {};
    return {from_fd_};
  }

  std::vector<LaunchEvent> collect() override {
    std::vector<LaunchEvent> events;
    if (from_fd_ < 0) return events;
    const bool open = reader_.read_from(from_fd_);
    while (auto msg = reader_.next()) {
      if (!*msg) {
        lost(events, "zygote sent a malformed message: " + msg->error());
        return events;
      }
      LaunchEvent ev;
      ev.seq = (*msg)->seq;
      switch ((*msg)->type) {
        case ControlType::kForked:
          ev.type = LaunchEvent::Type::kForked;
          ev.pid = static_cast<pid_t>((*msg)->pid);
          break;
        case ControlType::kForkFailed:
          ev.type = LaunchEvent::Type::kForkFailed;
          ev.message = (*msg)->message;
          break;
        case ControlType::kExited:
          ev.type = LaunchEvent::Type::kExited;
          ev.exit = std::move((*msg)->exit);
          ev.seq = ev.exit.seq;
          ev.pid = static_cast<pid_t>(ev.exit.pid);
          break;
        case ControlType::kFailed:
          lost(events, (*msg)->message);
          return events;
        default:
          lost(events, "zygote sent an unexpected message");
          return events;
      }
      events.push_back(std::move(ev));
    }
    if (!open) lost(events, "the zygote exited unexpectedly (" + describe_exit() + ")");
    return events;
  }

  const std::vector<std::string>& isolation() const override { return isolation_; }
  const std::vector<std::string>& warnings() const override { return warnings_; }
  std::string describe() const override { return "zygote (pid " + std::to_string(zygote_pid_) + ")"; }

 private:
  static constexpr std::size_t kMaxCrashBytes = 256 * 1024;

  void lost(std::vector<LaunchEvent>& events, std::string why) {
    LaunchEvent ev;
    ev.type = LaunchEvent::Type::kLauncherLost;
    ev.message = std::move(why);
    events.push_back(std::move(ev));
    stop();
  }

  std::string describe_exit() {
    try {
      if (child_.valid()) {
        child_.wait();
        const int code = child_.native_exit_code();
        if (WIFSIGNALED(code)) return "killed by signal " + std::to_string(WTERMSIG(code));
        return "exit code " + std::to_string(WEXITSTATUS(code));
      }
    } catch (const std::exception& e) {
      return e.what();
    }
    return "unknown";
  }

  void stop() {
    if (to_fd_ >= 0) ::close(std::exchange(to_fd_, -1));  // EOF: the zygote kills its children and exits
    if (from_fd_ >= 0) ::close(std::exchange(from_fd_, -1));
    try {
      if (child_.valid() && child_.running()) {
        child_.wait_for(std::chrono::seconds(2));
        if (child_.running()) child_.terminate();
      }
      if (child_.valid() && child_.joinable()) child_.detach();
    } catch (...) {
    }
  }

  LauncherSettings settings_;
  ControlReader reader_;
  bp::child child_;
  pid_t zygote_pid_ = 0;
  int to_fd_ = -1;
  int from_fd_ = -1;
  std::vector<std::string> isolation_;
  std::vector<std::string> warnings_;
};

std::unique_ptr<Launcher> make_zygote_launcher(const LauncherSettings& settings) {
  return std::make_unique<ZygoteLauncher>(settings);
}

}  // namespace pillbox
