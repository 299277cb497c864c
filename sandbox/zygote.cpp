#include "sandbox/zygote.h"

#include <fcntl.h>
#include <poll.h>
#include <sched.h>
#include <signal.h>
#include <sys/mman.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <sys/signalfd.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstring>
#include <map>
#include <vector>
#include <string>

#include "sandbox/child_runtime.h"
#include "sandbox/exit_codes.h"
#include "sandbox/fork_server.h"
#include "sandbox/namespaces.h"
#include "sandbox/private_tmp.h"
#include "shared/child_streams.h"
#include "shared/control.h"
#include "shared/process_group.h"
#include "shared/seccomp_notify.h"
#include "shared/task_input.h"

namespace pillbox::sandbox {
namespace {

constexpr int kControlIn = 0;
constexpr int kControlOut = 1;
constexpr std::size_t kMaxControlIn = 1u << 20;  // tickets and config are small

// How long a finished task's process group may take to die before the task
// is reported anyway.
constexpr auto kDrainLimit = std::chrono::seconds(2);

struct Running {
  std::uint64_t seq = 0;
  std::uint32_t slot = 0;
  ChildStreams streams;
  ViolationWatch watch;  // the kernel's word on the task's denied syscalls
  bool exited = false;  // the main process is reaped; its group is being drained
  ExitReport exit;
  std::chrono::steady_clock::time_point drain_deadline;
  // Exec mode: where the payload went, to see whether the task read it
  // (ExitReport::payload_read): our memory file, or its file's name in the
  // slot's payload dir.
  UniqueFd payload_memfd;
  std::string payload_name;
};

// A fresh memory file for a task's payload, its access time 0: the child
// writes the payload into it (which leaves the access time alone) and any
// read by the task sets it. Invalid when it cannot be made (the child then
// makes its own, and whether it was read is unknown).
UniqueFd unread_payload_memfd() {
  UniqueFd fd(::memfd_create("pillbox-payload", MFD_CLOEXEC));
  if (!fd.valid()) return fd;
  // mtime now, so that ctime equals it (was_read).
  const timespec times[2] = {{0, 0}, {0, UTIME_NOW}};
  if (::futimens(fd.get(), times) != 0) fd.reset();
  return fd;
}

// 1 when the file was read since its access time was set to 0, 0 when it
// was not, -1 when there is no such regular file. Read: the access time is
// no longer 0, or the change time is not the modification time any more
// (set together when the access time was zeroed, and by every write since:
// only a change of the times moves one without the other, as a program
// does that puts the access time back after reading: file -p, tar
// --atime-preserve, touch). `size`: the file's size then.
std::int32_t was_read(int fd, const char* name, std::uint64_t& size) {
  struct stat st {};
  const int r = name == nullptr ? ::fstat(fd, &st) : ::fstatat(fd, name, &st, AT_SYMLINK_NOFOLLOW);
  if (r != 0 || !S_ISREG(st.st_mode)) return -1;
  size = static_cast<std::uint64_t>(st.st_size);
  const bool atime_zero = st.st_atim.tv_sec == 0 && st.st_atim.tv_nsec == 0;
  const bool times_untouched = st.st_ctim.tv_sec == st.st_mtim.tv_sec && st.st_ctim.tv_nsec == st.st_mtim.tv_nsec;
  return atime_zero && times_untouched ? 0 : 1;
}

void send(const ControlMessage& m) {
  if (!write_all(kControlOut, encode_control(m))) _exit(1);  // supervisor gone
}

void send_failed(const std::string& message, ErrorCode code = ErrorCode::kSetup) {
  ControlMessage m;
  m.type = ControlType::kFailed;
  m.message = message;
  m.error_code = code;
  send(m);
}

class Zygote {
 public:
  Zygote(PreparedChild prep, ForkServer server) : prep_(std::move(prep)), server_(std::move(server)) {}

  int loop(int sigfd) {
    ControlReader reader(kMaxControlIn);
    std::vector<pollfd> fds;
    std::vector<pid_t> watched;
    for (;;) {
      fds.assign({{kControlIn, POLLIN, 0}, {sigfd, POLLIN, 0}});
      watched.clear();
      for (auto& [pid, r] : running_) {
        if (r.exited || r.watch.fd() < 0) continue;
        fds.push_back({r.watch.fd(), POLLIN, 0});
        watched.push_back(pid);
      }
      // While a group drains, wake up to enforce kDrainLimit even without SIGCHLD.
      if (::poll(fds.data(), fds.size(), draining() ? 50 : -1) < 0) {
        if (errno == EINTR) continue;
        return 1;
      }
      // A denied syscall: the kernel says so; the task dies at once.
      for (std::size_t i = 0; i < watched.size(); ++i) {
        if (fds[2 + i].revents == 0) continue;
        Running& r = running_.at(watched[i]);
        if (r.watch.take() && !r.exited) kill_task_group(watched[i]);
      }
      if (draining()) report_finished();
      if (fds[1].revents & POLLIN) {
        reap(sigfd);
        if (server_lost_) return shutdown(1);
      }
      if (fds[0].revents & (POLLIN | POLLHUP | POLLERR)) {
        const bool open = reader.read_from(kControlIn);
        while (auto msg = reader.next()) {
          if (!*msg) {
            send_failed("zygote: " + msg->error());
            return shutdown(1);
          }
          if ((*msg)->type == ControlType::kFork) fork_child((*msg)->ticket);
          if ((*msg)->type == ControlType::kKill) kill_task(static_cast<pid_t>((*msg)->pid));
          if (server_lost_) return shutdown(1);
        }
        if (!open) return shutdown(0);
      }
    }
  }

 private:
  void fork_child(const TaskTicket& ticket) {
    auto streams = open_child_streams(prep_.config.exec_mode());
    if (!streams) return fork_failed(ticket.seq, streams.error());
    ChildFds fds;
    // A private tmp: the task joins its slot's mount namespace (made once).
    if (prep_.read_only_view && prep_.config.policy.isolation.tmp_bytes > 0) {
      auto& ns = slot_namespaces_[ticket.slot];
      if (!ns.ns.valid()) {
        auto made = make_slot_namespace(prep_.config.policy.isolation, prep_.config.keep_visible,
                                        prep_.config.exec_payload_as_file);
        if (!made) return fork_failed(ticket.seq, made.error());
        ns = std::move(*made);
      }
      fds.mount_ns = ns.ns.get();
    }
    // The payload: a file under its name in the slot's payload dir, or a
    // memory file of ours.
    std::string payload_name;
    UniqueFd payload_memfd;
    if (prep_.config.exec_mode()) {
      auto ns = slot_namespaces_.find(ticket.slot);
      const bool in_dir = prep_.config.exec_payload_as_file && fds.mount_ns >= 0 && ns != slot_namespaces_.end() &&
                          ns->second.payload_dir.valid();
      if (in_dir) {
        payload_name = payload_file_name(ticket.key);
      } else {
        payload_memfd = unread_payload_memfd();
        fds.payload_memfd = payload_memfd.get();
      }
    }
    fds.crash_write = streams->crash_write.get();
    fds.listener_socket = streams->listener_socket_child.get();
    fds.stdout_fd = streams->stdout_file.get();
    fds.stderr_fd = streams->stderr_file.get();
    auto forked = server_.fork_child(ticket, fds);
    if (!forked && !server_.reachable()) return lose_server(forked.error());
    if (!forked) return fork_failed(ticket.seq, forked.error());
    const pid_t pid = *forked;
    streams->crash_write.reset();
    streams->listener_socket_child.reset();
    Running& r = running_[pid];
    r.seq = ticket.seq;
    r.slot = ticket.slot;
    r.watch = ViolationWatch(std::move(streams->listener_socket));
    r.streams = std::move(*streams);
    r.payload_memfd = std::move(payload_memfd);
    r.payload_name = std::move(payload_name);
    ControlMessage m;
    m.type = ControlType::kForked;
    m.seq = ticket.seq;
    m.pid = pid;
    send(m);
  }

  // No task can start without the fork server. Not the running tasks'
  // problem either: the zygote exits, and the supervisor restarts it and
  // reports the tasks that were running.
  void lose_server(const std::string& why) {
    if (server_lost_) return;
    server_lost_ = true;
    send_failed("zygote: " + why);
  }

  // Only our own running tasks: the pid comes from the supervisor, but a
  // stale one must not hit an unrelated process.
  void kill_task(pid_t pid) {
    auto it = running_.find(pid);
    if (it == running_.end() || it->second.exited) return;
    kill_task_group(pid);
  }

  void fork_failed(std::uint64_t seq, const std::string& why) {
    ControlMessage m;
    m.type = ControlType::kForkFailed;
    m.seq = seq;
    m.message = why;
    send(m);
  }

  void reap(int sigfd) {
    signalfd_siginfo info;
    while (::read(sigfd, &info, sizeof info) == static_cast<ssize_t>(sizeof info)) {
    }
    const auto is_task = [this](pid_t pid) {
      auto it = running_.find(pid);
      return it != running_.end() && !it->second.exited;
    };
    const auto on_other_exit = [this](pid_t pid, int status) {
      if (pid != server_.pid()) return;  // an orphan reparented to us: reaped, done
      lose_server("its fork server died (" +
                  (WIFSIGNALED(status) ? "signal " + std::to_string(WTERMSIG(status))
                                       : "exit " + std::to_string(WEXITSTATUS(status))) +
                  ")");
    };
    reap_children(is_task, [this](pid_t pid, int status, const rusage& ru) {
      Running& r = running_[pid];
      r.exited = true;
      // The child could not empty its slot's private dirs (what the slot's
      // previous task left): the slot's next task gets a new namespace, made
      // before it forks. Dropped here, before the exit is reported, so the
      // supervisor's next fork for the slot comes after. A payload exiting
      // with this code itself only renews its own slot.
      if (WIFEXITED(status) && WEXITSTATUS(status) == kExitSlotUncleanable && slot_namespaces_.erase(r.slot) > 0) {
        r.exit.slot_renewed = true;
      }
      r.drain_deadline = std::chrono::steady_clock::now() + kDrainLimit;
      ExitReport& e = r.exit;
      e.seq = r.seq;
      e.pid = pid;
      e.wait_status = status;
      e.utime_us = static_cast<std::uint64_t>(ru.ru_utime.tv_sec) * 1'000'000 + static_cast<std::uint64_t>(ru.ru_utime.tv_usec);
      e.stime_us = static_cast<std::uint64_t>(ru.ru_stime.tv_sec) * 1'000'000 + static_cast<std::uint64_t>(ru.ru_stime.tv_usec);
      e.max_rss_kb = static_cast<std::uint64_t>(ru.ru_maxrss);
    }, on_other_exit);
    report_finished();
  }

  // A task is reported once its main process exited and the rest of its
  // process group is dead and reaped (or kDrainLimit passed: something is
  // stuck in the kernel, and the supervisor's cgroup sweep takes over).
  void report_finished() {
    const auto now = std::chrono::steady_clock::now();
    for (auto it = running_.begin(); it != running_.end();) {
      Running& r = it->second;
      if (!r.exited || (!drain_process_group(it->first) && now < r.drain_deadline)) {
        ++it;
        continue;
      }
      // Whether the task read its payload; then its payload file goes
      // before the supervisor looks at what the slot's memory group still
      // holds.
      auto ns = slot_namespaces_.find(r.slot);
      const bool has_dir = ns != slot_namespaces_.end() && ns->second.payload_dir.valid();
      if (r.payload_memfd.valid()) {
        r.exit.payload_read = was_read(r.payload_memfd.get(), nullptr, r.exit.payload_file_size);
      } else if (!r.payload_name.empty() && has_dir) {
        r.exit.payload_read = was_read(ns->second.payload_dir.get(), r.payload_name.c_str(), r.exit.payload_file_size);
      }
      r.payload_memfd.reset();
      if (has_dir) remove_payload_files(ns->second.payload_dir.get());
      ControlMessage m;
      m.type = ControlType::kExited;
      r.watch.take();  // a notification that came with the exit
      r.exit.seccomp_watched = r.watch.watched();
      if (const auto& v = r.watch.violation()) {
        r.exit.violation_nr = v->nr;
        r.exit.violation_arch = v->arch;
      }
      m.exit = std::move(r.exit);
      collect_child_streams(r.streams, m.exit, prep_.config.policy.limits.output_bytes);
      it = running_.erase(it);
      send(m);
    }
  }

  bool draining() const {
    for (const auto& [pid, r] : running_) {
      if (r.exited) return true;
    }
    return false;
  }

  int shutdown(int code) {
    for (auto& [pid, r] : running_) {
      if (!r.exited) kill_task_group(pid);
    }
    return code;
  }

  PreparedChild prep_;
  ForkServer server_;
  bool server_lost_ = false;  // died or stopped answering: shut down (see lose_server)
  std::map<pid_t, Running> running_;
  std::map<std::uint32_t, SlotNamespace> slot_namespaces_;  // private tmp: one mount namespace per job slot
};


// After each fork the forking process's own writes take copy-on-write
// faults, and each fault flushes the TLB on every CPU its memory is live
// on: inter-processor interrupts that cost about a fifth of the
// per-task CPU on a paravirtualized host (measured: 6.9 -> 5.3 ms per echo
// task). Running the zygote, and so the fork server forked from it, on one
// CPU keeps those flushes local; children take back the full CPU set
// (PreparedChild::affinity).
void pin_to_current_cpu(PreparedChild& prep) {
  if (::sched_getaffinity(0, sizeof prep.affinity, &prep.affinity) != 0 || CPU_COUNT(&prep.affinity) < 2) return;
  const int cpu = ::sched_getcpu();
  if (cpu < 0 || !CPU_ISSET(cpu, &prep.affinity)) return;
  cpu_set_t one;
  CPU_ZERO(&one);
  CPU_SET(cpu, &one);
  prep.restore_affinity = ::sched_setaffinity(0, sizeof one, &one) == 0;
}

// Signal dispositions set to "ignore" survive exec: whatever the
// supervisor's own parent ignored would reach every child. Reset them once
// here so each child only undoes what the zygote itself changes.
void reset_all_signals() {
  for (int sig = 1; sig < NSIG; ++sig) {
    if (sig != SIGKILL && sig != SIGSTOP) ::signal(sig, SIG_DFL);
  }
}

}  // namespace

int run_zygote() {
  // Only the control pipes and stderr are ours; anything else the
  // supervisor's process had open is closed.
  ::close_range(3, ~0u, 0);
  reset_all_signals();
  // Die with the supervisor; adopt orphans of our children so they can be reaped.
  ::prctl(PR_SET_PDEATHSIG, SIGKILL);
  ::prctl(PR_SET_CHILD_SUBREAPER, 1);
  ::signal(SIGPIPE, SIG_IGN);

  auto config_msg = read_control_blocking(kControlIn, kMaxControlIn);
  if (!config_msg || config_msg->type != ControlType::kConfig) {
    send_failed("zygote: expected a config message: " + (config_msg ? std::string("wrong type") : config_msg.error()));
    return 1;
  }
  auto prep = prepare_child(config_msg->config);
  if (!prep) {
    send_failed(prep.error(), prep.error_code());
    return 1;
  }
  ControlMessage ready;
  ready.type = ControlType::kReady;
  if (prep->config.use_namespaces) {
    NamespaceOutcome ns = enter_namespaces(prep->config.policy.isolation);
    prep->in_user_namespace = ns.entered_user;
    prep->read_only_view = ns.read_only;
    // From here on, in a new PID namespace, this process is a fork of the
    // original, which only waits for it (see become_pid_namespace_init).
    if (become_pid_namespace_init(ns)) prep->parent_pid = ::getpid();  // 1: what its children see
    ready.ready.pid = ns.init_host_pid;
    ready.ready.isolation = std::move(ns.entered);
    ready.ready.warnings = std::move(ns.warnings);
  }
  if (ready.ready.pid == 0) ready.ready.pid = ::getpid();

  sigset_t mask;
  sigemptyset(&mask);
  sigaddset(&mask, SIGCHLD);
  sigprocmask(SIG_BLOCK, &mask, nullptr);
  pin_to_current_cpu(*prep);
  // After pinning: the server, which forks, runs on the zygote's CPU. Before
  // the signalfd, which the server has no use for.
  auto server = ForkServer::start(*prep, {kControlIn, kControlOut});
  if (!server) {
    send_failed("zygote: " + server.error());
    return 1;
  }
  const int sigfd = ::signalfd(-1, &mask, SFD_NONBLOCK | SFD_CLOEXEC);
  if (sigfd < 0) {
    send_failed(std::string("zygote: signalfd: ") + std::strerror(errno));
    return 1;
  }
  const int flags = ::fcntl(kControlIn, F_GETFL);
  ::fcntl(kControlIn, F_SETFL, flags | O_NONBLOCK);
  send(ready);
  Zygote zygote(std::move(*prep), std::move(*server));
  return zygote.loop(sigfd);
}

}  // namespace pillbox::sandbox
