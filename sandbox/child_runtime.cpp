#include "sandbox/child_runtime.h"

#include <fcntl.h>
#include <netdb.h>
#include <signal.h>
#include <sys/mman.h>
#include <sys/prctl.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <new>
#include <string>
#include <vector>
#include <zmq.hpp>

#include "sandbox/crash/crash_capture.h"
#include "sandbox/exit_codes.h"
#include "sandbox/namespaces.h"
#include "sandbox/privileges.h"
#include "sandbox/rlimits.h"
#include "shared/control.h"
#include "shared/crash_report.h"
#include "shared/wire.h"

namespace pillbox::sandbox {
namespace {

constexpr int kPayloadFileFd = 3;  // exec mode with "{}": the payload file
constexpr const char* kPayloadFilePath = "/proc/self/fd/3";

std::string errno_text(const std::string& what) { return what + ": " + std::strerror(errno); }

// Resets what a fork inherits from the zygote: blocked signals (SIGCHLD is
// blocked there for its signalfd) and dispositions.
void reset_signals() {
  sigset_t none;
  sigemptyset(&none);
  sigprocmask(SIG_SETMASK, &none, nullptr);
  for (int sig = 1; sig < NSIG; ++sig) {
    if (sig == SIGKILL || sig == SIGSTOP) continue;
    signal(sig, SIG_DFL);
  }
}

// Fixed fd layout: 0 = /dev/null, 1/2 = exec streams or /dev/null,
// kCrashFd = crash pipe; every other fd is closed.
bool arrange_fds(const ChildFds& fds) {
  const int devnull = ::open("/dev/null", O_RDWR | O_CLOEXEC);
  if (devnull < 0) return false;
  if (::dup2(devnull, 0) < 0) return false;
  if (::dup2(fds.stdout_fd >= 0 ? fds.stdout_fd : devnull, 1) < 0) return false;
  if (::dup2(fds.stderr_fd >= 0 ? fds.stderr_fd : devnull, 2) < 0) return false;
  if (fds.crash_write >= 0 && fds.crash_write != kCrashFd) {
    if (::dup2(fds.crash_write, kCrashFd) < 0) return false;
  }
  ::close_range(3, kCrashFd - 1, 0);
  ::close_range(kCrashFd + 1, ~0u, 0);
  return true;
}

Status join_cgroups(const std::vector<std::string>& procs_files) {
  for (const auto& path : procs_files) {
    const int fd = ::open(path.c_str(), O_WRONLY | O_CLOEXEC);
    if (fd < 0) return Status::error(errno_text("cannot open " + path));
    const bool ok = ::write(fd, "0", 1) == 1;
    const int err = errno;
    ::close(fd);
    if (!ok) return Status::error("cannot join cgroup " + path + ": " + std::strerror(err));
  }
  return Status::ok();
}

// The child's end of the wire.
class Wire {
 public:
  explicit Wire(const TaskTicket& ticket)
      : ticket_(ticket), ctx_(1), sock_(ctx_, zmq::socket_type::dealer) {
    sock_.set(zmq::sockopt::linger, 0);
    sock_.set(zmq::sockopt::reconnect_ivl, -1);  // reconnecting would need socket(2) under seccomp
    sock_.connect(ticket.endpoint);
  }

  bool send(FrameType type, std::string data = {}, std::string message = {},
            ResultStatus status = ResultStatus::kOk) {
    Frame f;
    f.type = type;
    f.task = ticket_.seq;
    f.secret = ticket_.secret;
    f.pid = ::getpid();
    f.data = std::move(data);
    f.message = std::move(message);
    f.status = status;
    const std::string bytes = encode_frame(f);
    try {
      return sock_.send(zmq::buffer(bytes), zmq::send_flags::none).has_value();
    } catch (const zmq::error_t&) {
      return false;
    }
  }

  // Waits for one frame of `type` from the supervisor, up to `timeout_ms`.
  bool receive(FrameType type, int timeout_ms, Frame* out = nullptr) {
    try {
      sock_.set(zmq::sockopt::rcvtimeo, timeout_ms);
      zmq::message_t msg;
      if (!sock_.recv(msg, zmq::recv_flags::none)) return false;
      // Frames from the supervisor are trusted; decoding stays strict anyway.
      auto f = decode_frame(std::string_view(static_cast<const char*>(msg.data()), msg.size()), msg.size());
      if (!f || f->type != type || f->task != ticket_.seq || !secrets_equal(f->secret, ticket_.secret)) return false;
      if (out) *out = std::move(*f);
      return true;
    } catch (const zmq::error_t&) {
      return false;
    }
  }

 private:
  const TaskTicket& ticket_;
  zmq::context_t ctx_;
  zmq::socket_t sock_;
};

[[noreturn]] void fail_setup(Wire& wire, const std::string& message) {
  wire.send(FrameType::kSetupFailed, {}, message);
  wire.receive(FrameType::kAck, 2000);
  _exit(kExitSetupFailed);
}

Frame run_in_process(Handler& handler, std::string_view payload, std::size_t max_output) {
  Frame result;
  result.type = FrameType::kResult;
  try {
    HandlerResult r = handler.run(payload, max_output);
    if (r.status == HandlerStatus::kOutputLimit || r.output.size() > max_output) {
      result.status = ResultStatus::kOutputLimit;
      result.message = "result larger than " + std::to_string(max_output) + " bytes";
    } else if (r.status == HandlerStatus::kError) {
      result.status = ResultStatus::kHandlerError;
      result.message = r.message.substr(0, kMaxMessageBytes / 2);
    } else {
      result.data = std::move(r.output);
    }
  } catch (const std::bad_alloc&) {
    result.status = ResultStatus::kOutOfMemory;
    result.data.clear();
    result.message = "allocation failed (std::bad_alloc) under the memory limit";
  } catch (const std::exception& e) {
    result.status = ResultStatus::kHandlerError;
    result.message = std::string(e.what()).substr(0, kMaxMessageBytes / 2);
  }
  return result;
}

std::vector<char*> c_strings(std::vector<std::string>& v) {
  std::vector<char*> out;
  for (auto& s : v) out.push_back(s.data());
  out.push_back(nullptr);
  return out;
}

[[noreturn]] void exec_program(const PreparedChild& prep, Wire& wire, int payload_fd, const std::string& payload) {
  const ChildConfig& cfg = prep.config;
  // The payload goes into a memfd: seekable like a file, no size limit of a pipe.
  std::size_t off = 0;
  while (off < payload.size()) {
    const ssize_t n = ::write(payload_fd, payload.data() + off, payload.size() - off);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) break;
    off += static_cast<std::size_t>(n);
  }
  ::lseek(payload_fd, 0, SEEK_SET);
  std::vector<std::string> argv = cfg.exec_argv;
  if (cfg.exec_payload_as_file) {
    ::dup2(payload_fd, kPayloadFileFd);
    for (auto& a : argv) {
      for (std::size_t pos; (pos = a.find("{}")) != std::string::npos;) a.replace(pos, 2, kPayloadFilePath);
    }
  } else {
    ::dup2(payload_fd, 0);
  }
  std::vector<std::string> env = {"PATH=/usr/local/bin:/usr/bin:/bin", "LANG=C.UTF-8", "HOME=/"};
  if (!cfg.crash_lib.empty()) {
    env.push_back("LD_PRELOAD=" + cfg.crash_lib);
    env.push_back("PILLBOX_CRASH_FD=" + std::to_string(kCrashFd));
  }
  // Set last: writing the payload above must not count against it.
  apply_file_size_limit(cfg.policy.limits.file_size_bytes);
  auto cargv = c_strings(argv);
  auto cenv = c_strings(env);
  ::execve(cargv[0], cargv.data(), cenv.data());
  const std::string why = errno_text("execve " + argv[0]);
  wire.send(FrameType::kResult, {}, why, ResultStatus::kHandlerError);
  wire.receive(FrameType::kAck, 1000);
  _exit(kExitExecFailed);
}

// Things every child would otherwise do for itself after the fork: ZeroMQ
// looks up the "tcp" protocol through NSS (dlopen of libnss_*, reading
// /etc/nsswitch.conf and /etc/protocols) and the CPU count.
void warm_up_libraries() {
  ::getprotobyname("tcp");
  ::sysconf(_SC_NPROCESSORS_ONLN);
}

}  // namespace

Expected<PreparedChild> prepare_child(const ChildConfig& config) {
  PreparedChild prep;
  prep.config = config;
  if (!config.exec_mode()) {
    auto handler = make_handler(config.handler, config.args);
    if (!handler) return Error{std::string(kConfigErrorPrefix) + handler.error()};
    prep.handler = std::move(*handler);
  }
  auto filter = compile_filter(config.policy.seccomp, config.exec_mode());
  if (!filter) return Error{"seccomp policy: " + filter.error()};
  prep.filter = std::move(*filter);
  crash::prepare();
  warm_up_libraries();
  prep.parent_pid = ::getpid();
  return prep;
}

void run_child(const PreparedChild& prep, const TaskTicket& ticket, const ChildFds& fds, bool enter_own_namespaces) {
  const ChildConfig& cfg = prep.config;
  const Limits& limits = cfg.policy.limits;

  // 1. Own session and process group (the supervisor kills the group), and
  //    die with the parent.
  ::setsid();
  ::prctl(PR_SET_PDEATHSIG, SIGKILL);
  if (::getppid() != prep.parent_pid) _exit(kExitOrphaned);
  reset_signals();

  // 2. Nothing inherited but what we chose; no environment.
  if (!arrange_fds(fds)) _exit(kExitSetupFailed);
  ::clearenv();

  // 3. Things that need root, gathered so the failure can be reported on the wire.
  std::string setup_error;
  if (auto s = join_cgroups(ticket.cgroup_procs); !s) setup_error = s.message();
  if (enter_own_namespaces) enter_namespaces(cfg.policy.isolation);
  crash::arm(kCrashFd);

  // 4. The wire, connected while still root (the runtime dir is 0700).
  Wire wire(ticket);
  if (!wire.send(FrameType::kHello)) _exit(kExitNoSupervisor);
  const int wire_timeout_ms = static_cast<int>(std::min<std::uint64_t>(limits.wall_ms + 5000, 3'600'000));
  if (!wire.receive(FrameType::kWelcome, wire_timeout_ms)) _exit(kExitNoSupervisor);
  if (!setup_error.empty()) fail_setup(wire, setup_error);

  // 5. Confinement, most permissive step first.
  int payload_fd = -1;
  if (cfg.exec_mode()) {
    payload_fd = ::memfd_create("pillbox-payload", MFD_CLOEXEC);
    if (payload_fd < 0) fail_setup(wire, errno_text("memfd_create (payload)"));
  }
  if (auto s = apply_rlimits(limits, current_address_space_bytes(), !ticket.cgroup_procs.empty()); !s) fail_setup(wire, s.message());
  if (!cfg.exec_mode()) {
    if (auto s = apply_file_size_limit(limits.file_size_bytes); !s) fail_setup(wire, s.message());
  }
  if (cfg.drop_privileges) {
    if (auto s = drop_privileges(cfg.sandbox_uid, cfg.sandbox_gid); !s) fail_setup(wire, s.message());
  }
  if (auto s = set_no_new_privs(); !s) fail_setup(wire, s.message());
  if (cfg.exec_mode() && ::access(cfg.exec_argv[0].c_str(), X_OK) != 0) {
    fail_setup(wire, errno_text("cannot execute " + cfg.exec_argv[0] + " as uid " + std::to_string(::getuid())));
  }
  if (auto s = load_filter(prep.filter); !s) fail_setup(wire, s.message());

  // 6. Only now the payload.
  if (!wire.send(FrameType::kReady)) _exit(kExitNoSupervisor);
  Frame task;
  if (!wire.receive(FrameType::kTask, wire_timeout_ms, &task)) _exit(kExitNoSupervisor);

  if (cfg.exec_mode()) exec_program(prep, wire, payload_fd, task.data);

  Frame result = run_in_process(*prep.handler, task.data, limits.output_bytes);
  if (!wire.send(FrameType::kResult, std::move(result.data), std::move(result.message), result.status)) {
    _exit(kExitNoSupervisor);
  }
  // Wait for the ACK so the result is never lost in flight when we exit.
  wire.receive(FrameType::kAck, wire_timeout_ms);
  _exit(0);
}

}  // namespace pillbox::sandbox
