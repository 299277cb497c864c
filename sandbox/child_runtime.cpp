#include "sandbox/child_runtime.h"

#include <fcntl.h>
#include <signal.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/prctl.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <new>
#include <string>
#include <vector>
#include <optional>

#include "sandbox/crash/crash_capture.h"
#include "sandbox/exit_codes.h"
#include "sandbox/namespaces.h"
#include "sandbox/plugin_privileges.h"
#include "sandbox/private_tmp.h"
#include "sandbox/privileges.h"
#include "sandbox/rlimits.h"
#include "sandbox/zmtp_client.h"
#include "shared/control.h"
#include "shared/crash_report.h"
#include "shared/seccomp_notify.h"
#include "shared/task_input.h"
#include "shared/wire.h"

namespace pillbox::sandbox {
namespace {

constexpr int kPayloadFileFd = 3;  // exec mode naming the payload's file without a private /tmp: the memory file
constexpr int kMountNsFd = 1002;   // until joined: the slot's mount namespace (private tmp, zygote mode)
constexpr int kPayloadMemfdFd = 1003;  // the zygote's memory file for the payload, until it takes its place

std::string errno_text(const std::string& what) { return what + ": " + std::strerror(errno); }

// Undoes what the zygote itself changed: it blocks SIGCHLD (for its
// signalfd) and ignores SIGPIPE. Everything else is at its default already
// (reset_all_signals ran when the zygote started).
void reset_inherited_signals() {
  sigset_t none;
  sigemptyset(&none);
  sigprocmask(SIG_SETMASK, &none, nullptr);
  signal(SIGPIPE, SIG_DFL);
}

// Fixed fd layout: 0 = /dev/null, 1/2 = exec streams or /dev/null, 3 = held
// for the payload (close-on-exec /dev/null),
// kCrashFd = crash pipe, kListenerSocketFd = where the seccomp listener goes
// (closed again before anything untrusted runs); every other fd is closed.
bool arrange_fds(const ChildFds& fds) {
  static_assert(kListenerSocketFd == kCrashFd + 1 && kMountNsFd == kListenerSocketFd + 1 &&
                    kPayloadMemfdFd == kMountNsFd + 1,
                "the kept fds are one range");
  // The fds we are handed may have any numbers, 0 to 2 included (when the
  // zygote was started with one of them closed): move every one out of the
  // way before 0, 1 and 2 are overwritten.
  if (fds.crash_write >= 0 && fds.crash_write != kCrashFd) {
    if (::dup2(fds.crash_write, kCrashFd) < 0) return false;
  }
  if (fds.listener_socket >= 0 && fds.listener_socket != kListenerSocketFd) {
    if (::dup2(fds.listener_socket, kListenerSocketFd) < 0) return false;
  }
  if (fds.mount_ns >= 0 && fds.mount_ns != kMountNsFd) {
    if (::dup2(fds.mount_ns, kMountNsFd) < 0) return false;
  }
  if (fds.payload_memfd >= 0 && fds.payload_memfd != kPayloadMemfdFd) {
    if (::dup2(fds.payload_memfd, kPayloadMemfdFd) < 0) return false;
  }
  const int out = fds.stdout_fd >= 0 ? ::fcntl(fds.stdout_fd, F_DUPFD_CLOEXEC, 3) : -1;
  const int err = fds.stderr_fd >= 0 ? ::fcntl(fds.stderr_fd, F_DUPFD_CLOEXEC, 3) : -1;
  if ((fds.stdout_fd >= 0 && out < 0) || (fds.stderr_fd >= 0 && err < 0)) return false;
  const int devnull = ::open("/dev/null", O_RDWR | O_CLOEXEC);
  if (devnull < 0) return false;
  if (::dup2(devnull, 0) < 0) return false;
  if (::dup2(out >= 0 ? out : devnull, 1) < 0) return false;
  if (::dup2(err >= 0 ? err : devnull, 2) < 0) return false;
  ::close_range(3, kCrashFd - 1, 0);
  // fd 3 is held (close-on-exec) until a payload memory file may replace it:
  // the wire's socket, opened next, would take it otherwise, and putting
  // the payload there would cut the child off from the supervisor (an
  // execve failure could not be reported).
  if (::fcntl(0, F_DUPFD_CLOEXEC, kPayloadFileFd) != kPayloadFileFd) return false;
  // The fds past kCrashFd that were handed over stay; the rest go.
  const int last = fds.payload_memfd >= 0 ? kPayloadMemfdFd
                   : fds.mount_ns >= 0      ? kMountNsFd
                   : fds.listener_socket >= 0 ? kListenerSocketFd
                                              : kCrashFd;
  if (fds.listener_socket < 0 && last > kListenerSocketFd) ::close(kListenerSocketFd);
  if (fds.mount_ns < 0 && last > kMountNsFd) ::close(kMountNsFd);
  ::close_range(static_cast<unsigned>(last) + 1, ~0u, 0);
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

// The child's end of the wire: frames over a ZMTP connection.
class Wire {
 public:
  Wire(const TaskTicket& ticket, ZmtpClient client) : ticket_(ticket), client_(std::move(client)) {}

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
    return client_.send(encode_frame(f), kSendTimeoutMs).is_ok();
  }

  // The payload: one TASK frame from the supervisor.
  std::optional<Frame> receive_task(int timeout_ms) {
    auto bytes = client_.receive(timeout_ms, kMaxPayloadFrame);
    if (!bytes) return std::nullopt;
    // Frames from the supervisor are trusted; decoding stays strict anyway.
    auto f = decode_frame(*bytes, bytes->size());
    if (!f || f->type != FrameType::kTask || f->task != ticket_.seq || !secrets_equal(f->secret, ticket_.secret)) {
      return std::nullopt;
    }
    return std::move(*f);
  }

 private:
  static constexpr int kSendTimeoutMs = 10'000;
  static constexpr std::size_t kMaxPayloadFrame = (std::size_t{1} << 32) + kFrameOverhead;
  const TaskTicket& ticket_;
  ZmtpClient client_;
};

[[noreturn]] void fail_setup(Wire& wire, const std::string& message, int exit_code = kExitSetupFailed) {
  wire.send(FrameType::kSetupFailed, {}, message);
  _exit(exit_code);
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

// Where an exec task's payload goes: a file under its own name in the
// private /tmp's payload dir when the command line names the file and the
// task has one; otherwise a memory file (seekable like a file, no size limit
// of a pipe), which is stdin, or fd 3 when the command line names the file.
struct PayloadFile {
  int fd = -1;
  std::string path;  // what {} expands to ("" when stdin is the payload)
};

[[noreturn]] void exec_program(const PreparedChild& prep, Wire& wire, const TaskTicket& ticket,
                               const PayloadFile& file, const std::string& payload) {
  const ChildConfig& cfg = prep.config;
  const int payload_fd = file.fd;
  std::size_t off = 0;
  while (off < payload.size()) {
    const ssize_t n = ::write(payload_fd, payload.data() + off, payload.size() - off);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) break;
    off += static_cast<std::size_t>(n);
  }
  ::lseek(payload_fd, 0, SEEK_SET);
  // Access time 0, now that it is written: a read by the task sets it, and
  // the zygote tells "never read" (a command that fails on its own setup)
  // from a failure of the payload's (ExitReport::payload_read). The zygote
  // set it on its own memory file already; this is for the file in the
  // payload dir, which is the task's uid's own.
  // mtime now, so that ctime equals it (a later change of the times shows).
  const timespec times[2] = {{0, 0}, {0, UTIME_NOW}};
  ::futimens(payload_fd, times);
  std::vector<std::string> argv = cfg.exec_argv;
  // argv[0] is the command the supervisor resolved: a path, never a template.
  for (std::size_t i = 1; i < argv.size(); ++i) {
    if (has_replacement_string(argv[i])) argv[i] = expand_replacement_strings(argv[i], file.path, ticket.key);
  }
  if (!cfg.exec_payload_as_file) {
    ::dup2(payload_fd, 0);
  } else if (file.path == kPayloadFdPath) {
    ::dup2(payload_fd, kPayloadFileFd);
  }
  // The file under its own name is closed: the program opens it by name,
  // and nothing of it stays open that the program did not open itself.
  ::close(payload_fd);
  std::vector<std::string> env = {std::string("PATH=") + kExecTaskPath, "LANG=C.UTF-8", "HOME=/",
                                  "PILLBOX_KEY=" + ticket.key};
  if (cfg.policy.isolation.tmp_bytes > 0) env.push_back("TMPDIR=/tmp");
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
  wire.send(FrameType::kResult, {}, why, ResultStatus::kExecFailed);
  _exit(kExitExecFailed);
}

// A handler prepared before any task (built-in, or a plugin without root)
// is loaded in the zygote, whose fds 0 and 1 are its control pipes to the
// supervisor, or in spawn mode's --child and --check, where they are still
// the supervisor's stdin and stdout (the task list, the --json records).
// Constructors and init that read stdin or print (debugging code in a
// library) get /dev/null instead, for the load only. (stderr stays: it is
// the supervisor's, and a message there is only a message.)
Expected<std::unique_ptr<Handler>> make_handler_off_stdio(const ChildConfig& config) {
  const int saved_in = ::fcntl(0, F_DUPFD_CLOEXEC, 3);
  const int saved_out = ::fcntl(1, F_DUPFD_CLOEXEC, 3);
  const int devnull = ::open("/dev/null", O_RDWR | O_CLOEXEC);
  if (devnull >= 0) {
    ::dup2(devnull, 0);
    ::dup2(devnull, 1);
    ::close(devnull);
  }
  auto handler = make_handler(config.handler, config.args);
  const auto restore = [](int saved, int fd) {
    if (saved >= 0) {
      ::dup2(saved, fd);
      ::close(saved);
    } else {
      ::close(fd);  // it was closed before
    }
  };
  restore(saved_in, 0);
  restore(saved_out, 1);
  return handler;
}

}  // namespace

Expected<PreparedChild> prepare_child(const ChildConfig& config, bool check_deferred) {
  PreparedChild prep;
  prep.config = config;
  if (load_handler_in_child(config)) {
    if (auto s = check_deferred ? check_handler_unprivileged(config) : Status::ok(); !s) {
      if (s.code() != ErrorCode::kConfig) return Error{s.message()};
      return Error{std::string(kConfigErrorPrefix) + s.message(), ErrorCode::kConfig};
    }
  } else if (!config.exec_mode()) {
    auto handler = make_handler_off_stdio(config);
    if (!handler) return Error{std::string(kConfigErrorPrefix) + handler.error(), ErrorCode::kConfig};
    prep.handler = std::move(*handler);
  }
  auto filter = compile_filter(config.policy.seccomp, config.exec_mode());
  if (!filter) return Error{"seccomp policy: " + filter.error()};
  prep.filter = std::move(*filter);
  if (load_handler_in_child(config) && config.policy.seccomp.enabled) {
    auto before_plugin = compile_namespace_filter();
    if (!before_plugin) return Error{"seccomp filter for loading the plugin: " + before_plugin.error()};
    prep.plugin_load_filter = std::move(*before_plugin);
  }
  crash::prepare();
  prep.parent_pid = ::getpid();
  return prep;
}

void run_child(const PreparedChild& prep, const TaskTicket& ticket, const ChildFds& fds, bool enter_own_namespaces) {
  const ChildConfig& cfg = prep.config;
  const Limits& limits = cfg.policy.limits;

  // 1. Own session and process group (the supervisor kills the group), and
  //    die with the parent. The zygote reset every other signal at start.
  ::setsid();
  ::prctl(PR_SET_PDEATHSIG, SIGKILL);
  if (::getppid() != prep.parent_pid) _exit(kExitOrphaned);
  reset_inherited_signals();
  if (prep.restore_affinity) ::sched_setaffinity(0, sizeof prep.affinity, &prep.affinity);

  // 2. Nothing inherited but what we chose; no environment.
  if (!arrange_fds(fds)) _exit(kExitSetupFailed);
  ::clearenv();

  // 3. Things that need root, gathered so a failure can be reported on the wire.
  std::string setup_error;
  if (auto s = join_cgroups(ticket.cgroup_procs); !s) setup_error = s.message();
  bool in_user_namespace = prep.in_user_namespace;
  bool read_only_view = prep.read_only_view;
  if (enter_own_namespaces) {
    const NamespaceOutcome ns = enter_namespaces(cfg.policy.isolation);
    in_user_namespace = ns.entered_user;
    read_only_view = ns.read_only;
  }
  crash::arm(kCrashFd);
  // The connection is made while still root: the runtime dir is 0700.
  auto client = ZmtpClient::connect(ticket.endpoint);
  if (!client) _exit(kExitNoSupervisor);
  // The supervisor's side of the handshake arrives while we confine ourselves.
  if (!client->start_handshake(10'000)) _exit(kExitNoSupervisor);
  Wire wire(ticket, std::move(*client));
  if (!setup_error.empty()) fail_setup(wire, setup_error);
  // Its own /tmp, /var/tmp and /dev/shm. Only inside a read-only view: where
  // the host refused the mount namespace, the warnings already say the file
  // system stays as writable as the uid allows.
  const bool private_tmp = read_only_view && cfg.policy.isolation.tmp_bytes > 0;
  if (fds.mount_ns >= 0) {
    const Status joined = join_private_tmp(kMountNsFd);
    ::close(kMountNsFd);
    if (!joined) fail_setup(wire, joined.message());
  } else if (private_tmp) {
    if (auto s = enter_private_tmp(cfg.policy.isolation, cfg.keep_visible, cfg.exec_payload_as_file); !s) {
      fail_setup(wire, s.message());
    }
  } else if (cfg.exec_mode() && !cfg.working_dir.empty()) {
    // No private /tmp to work in: the command runs where `run` was started,
    // and a record runs again where it was made, not where the operator
    // happens to be. Entered as root, as the inherited directory would be.
    if (::chdir(cfg.working_dir.c_str()) != 0) fail_setup(wire, errno_text("chdir " + cfg.working_dir));
  }

  // 4. Confinement, most permissive step first.
  PayloadFile payload_file;
  const bool payload_in_dir = cfg.exec_payload_as_file && (private_tmp || fds.mount_ns >= 0) && has_payload_dir();
  if (cfg.exec_mode() && !payload_in_dir) {
    // The zygote's memory file when it made one (it sees from it whether
    // the task read its payload), else one of our own.
    if (fds.payload_memfd >= 0) {
      payload_file.fd = ::fcntl(kPayloadMemfdFd, F_DUPFD_CLOEXEC, 3);
      ::close(kPayloadMemfdFd);
    } else {
      payload_file.fd = ::memfd_create("pillbox-payload", MFD_CLOEXEC);
    }
    if (payload_file.fd < 0) fail_setup(wire, errno_text("memfd_create (payload)"));
    if (cfg.exec_payload_as_file) payload_file.path = kPayloadFdPath;
  } else if (fds.payload_memfd >= 0) {
    ::close(kPayloadMemfdFd);  // the payload goes into its own file: nothing of it stays open
  }
  if (auto s = apply_rlimits(limits, current_address_space_bytes(), !ticket.cgroup_procs.empty()); !s) {
    fail_setup(wire, s.message());
  }
  if (!cfg.exec_mode()) {
    if (auto s = apply_file_size_limit(limits.file_size_bytes); !s) fail_setup(wire, s.message());
  }
  if (cfg.drop_privileges) {
    if (auto s = drop_privileges(ticket.uid, ticket.gid); !s) fail_setup(wire, s.message());
    // A change of credentials clears the parent-death signal (prctl(2)):
    // set it again, and check that the parent did not die meanwhile.
    ::prctl(PR_SET_PDEATHSIG, SIGKILL);
    if (::getppid() != prep.parent_pid) _exit(kExitOrphaned);
    // A uid from the pool belongs to this job slot alone, so every other
    // process running as it is a leftover of the slot's earlier tasks (a
    // setsid'd daemon escapes its process group, and without a cgroup
    // nothing else finds it). It must be gone before this task's payload
    // exists: kill(-1) as this uid reaches exactly those processes.
    if (cfg.policy.isolation.uid_pool_size > 0) ::kill(-1, SIGKILL);
  }
  if (in_user_namespace) {
    if (auto s = drop_all_capabilities(); !s) fail_setup(wire, s.message());
  }
  if (auto s = set_no_new_privs(); !s) fail_setup(wire, s.message());
  // A slot's namespace still holds what its previous task wrote: removed now,
  // as this task's uid, before anything of this task runs. What cannot be
  // removed is never this task's to live with: the zygote makes the slot a
  // new namespace (kExitSlotUncleanable), and the task runs again there.
  if (fds.mount_ns >= 0) {
    if (auto s = empty_private_dirs(); !s) {
      fail_setup(wire, s.message() + "; the slot gets a new private /tmp namespace", kExitSlotUncleanable);
    }
  }
  // The payload's file, as the task's uid (it is the task's to read, change
  // or remove), before the filter: what is left after it is only writing.
  if (payload_in_dir) {
    const std::string name = payload_file_name(ticket.key);
    auto made = create_payload_file(name);
    if (!made) {
      fail_setup(wire, made.error() + (fds.mount_ns >= 0 ? "; the slot gets a new private /tmp namespace" : ""),
                 fds.mount_ns >= 0 ? kExitSlotUncleanable : kExitSetupFailed);
    }
    payload_file.fd = made->release();
    payload_file.path = std::string(kPayloadDir) + "/" + name;
  }
  // A plugin, as root: loaded only now, as the slot's uid with no capability.
  std::unique_ptr<Handler> loaded;
  Handler* handler = prep.handler.get();
  if (!cfg.exec_mode() && handler == nullptr) {
    // Its code runs before the policy's filter: without this one it could
    // enter a new user namespace, and parse each payload with every
    // capability there.
    if (auto s = load_filter(prep.plugin_load_filter); !s) fail_setup(wire, s.error());
    auto made = make_handler(cfg.handler, cfg.args);
    if (!made) fail_setup(wire, "cannot load the handler as uid " + std::to_string(::getuid()) + ": " + made.error());
    loaded = std::move(*made);
    handler = loaded.get();
    // Its module must be in the crash handler's table, or its frames would
    // be raw addresses (and its fingerprints change with every run).
    crash::prepare();
  }
  if (cfg.exec_mode() && ::access(cfg.exec_argv[0].c_str(), X_OK) != 0) {
    fail_setup(wire, errno_text("cannot execute " + cfg.exec_argv[0] + " as uid " + std::to_string(::getuid())));
  }
  auto listener = load_filter(prep.filter);
  if (!listener) fail_setup(wire, listener.error());
  // The kernel's listener for this task's violations goes to the parent, and
  // neither it nor the socket stays here: the task never sees either.
  if (fds.listener_socket >= 0) {
    if (!send_listener(kListenerSocketFd, *listener)) fail_setup(wire, "cannot hand the seccomp listener to the parent");
    ::close(kListenerSocketFd);
  }
  if (*listener >= 0) ::close(*listener);

  // 5. Only now the payload.
  if (!wire.send(FrameType::kHello)) _exit(kExitNoSupervisor);
  const int wire_timeout_ms = static_cast<int>(std::min<std::uint64_t>(limits.wall_ms + 5000, 3'600'000));
  std::optional<Frame> task = wire.receive_task(wire_timeout_ms);
  if (!task) _exit(kExitNoSupervisor);

  if (cfg.exec_mode()) exec_program(prep, wire, ticket, payload_file, task->data);

  Frame result = run_in_process(*handler, task->data, limits.output_bytes);
  if (!wire.send(FrameType::kResult, std::move(result.data), std::move(result.message), result.status)) {
    _exit(kExitNoSupervisor);
  }
  // The result is in the supervisor's socket buffer; it stays readable after we exit.
  _exit(0);
}

}  // namespace pillbox::sandbox
