#include "supervisor/exec/guardian.h"

#include <fcntl.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>

#include "shared/uid_sweep.h"

namespace pillbox {
namespace {

// Everything below runs in the forked guardian: raw system calls only, on
// memory that was prepared before the fork.

// `keep` is sorted.
void close_all_but(const std::vector<int>& keep) {
  unsigned from = 0;
  for (int fd : keep) {
    if (fd < 0) continue;
    if (static_cast<unsigned>(fd) > from) ::close_range(from, static_cast<unsigned>(fd) - 1, 0);
    from = static_cast<unsigned>(fd) + 1;
  }
  ::close_range(from, ~0u, 0);
}

// kill(-1) as `uid` reaches exactly that uid's processes, in one pass during
// which nothing can fork: a fork bomb cannot outrun it. But the killer is
// then within their reach: one SIGSTOPping its uid could stop it and hang a
// plain waitpid (and the supervisor waiting for the guardian). So a stopped
// killer is killed, and sweep() follows with uid_sweep from root.
void kill_uid(std::uint32_t uid) {
  const pid_t pid = ::fork();
  if (pid == 0) {
    if (::setresuid(uid, uid, uid) == 0) ::kill(-1, SIGKILL);
    _exit(0);
  }
  if (pid <= 0) return;
  int status = 0;
  pid_t r;
  while ((r = ::waitpid(pid, &status, WUNTRACED)) < 0 && errno == EINTR) {
  }
  if (r == pid && WIFSTOPPED(status)) {
    ::kill(pid, SIGKILL);
    while (::waitpid(pid, nullptr, 0) < 0 && errno == EINTR) {
    }
  }
}

// SIGKILLs the pids listed in one cgroup.procs file; false when it listed none.
bool kill_listed(const char* procs_file) {
  static char buf[65536];
  const int fd = ::open(procs_file, O_RDONLY | O_CLOEXEC);
  if (fd < 0) return false;
  bool any = false;
  long pid = 0;
  bool in_number = false;
  for (;;) {
    const ssize_t n = ::read(fd, buf, sizeof buf);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) break;
    for (ssize_t i = 0; i < n; ++i) {
      if (buf[i] >= '0' && buf[i] <= '9') {
        pid = pid * 10 + (buf[i] - '0');
        in_number = true;
      } else if (in_number) {
        if (pid > 0) ::kill(static_cast<pid_t>(pid), SIGKILL);
        any = true;
        pid = 0;
        in_number = false;
      }
    }
  }
  if (in_number && pid > 0) {
    ::kill(static_cast<pid_t>(pid), SIGKILL);
    any = true;
  }
  ::close(fd);
  return any;
}

[[noreturn]] void sweep(const GuardianTargets& t) {
  // Two passes over the uids: the second catches a process that was being
  // created by a fork when the first ran.
  for (int pass = 0; pass < 2; ++pass) {
    for (std::uint32_t uid : t.uids) kill_uid(uid);
  }
  // Then from root, which nothing of those uids can stop (about 2 s at most).
  sweep_uids(t.uids.data(), t.uids.size(), 1000);
  // A cgroup lists a process until it has exited; SIGKILL is final, so this
  // converges within a few rounds (bounded at about 2 s).
  for (int round = 0; round < 2000; ++round) {
    bool any = false;
    for (const std::string& file : t.cgroup_procs) any = kill_listed(file.c_str()) || any;
    if (!any) break;
    const timespec pause{0, 1'000'000};
    ::nanosleep(&pause, nullptr);
  }
  _exit(0);
}

[[noreturn]] void guard(int read_fd, const GuardianTargets& t) {
  ::setsid();
  ::prctl(PR_SET_NAME, "pillbox-guard", 0, 0, 0);
  for (int sig : {SIGINT, SIGTERM, SIGHUP, SIGPIPE, SIGQUIT, SIGTSTP, SIGTTIN, SIGTTOU}) ::signal(sig, SIG_IGN);
  sigset_t none;
  sigemptyset(&none);
  ::sigprocmask(SIG_SETMASK, &none, nullptr);
  close_all_but(t.keep_fds);  // holds read_fd too
  // EOF: the supervisor closed its end, at the end of the run or by dying.
  for (;;) {
    char c = 0;
    const ssize_t n = ::read(read_fd, &c, 1);
    if (n == 0 || (n < 0 && errno != EINTR)) break;
  }
  sweep(t);
}

}  // namespace

Expected<std::unique_ptr<Guardian>> Guardian::start(const GuardianTargets& targets) {
  int fds[2];
  if (::pipe2(fds, O_CLOEXEC) != 0) return Error{std::string("guardian: pipe2: ") + std::strerror(errno)};
  GuardianTargets prepared = targets;
  prepared.keep_fds.push_back(fds[0]);
  std::sort(prepared.keep_fds.begin(), prepared.keep_fds.end());
  const pid_t pid = ::fork();
  if (pid < 0) {
    const int err = errno;
    ::close(fds[0]);
    ::close(fds[1]);
    return Error{std::string("guardian: fork: ") + std::strerror(err)};
  }
  if (pid == 0) {
    ::close(fds[1]);
    guard(fds[0], prepared);
  }
  ::close(fds[0]);
  return std::unique_ptr<Guardian>(new Guardian(fds[1], pid));
}

Guardian::~Guardian() {
  ::close(pipe_write_);
  // It sweeps and exits (quickly: the run's cgroups are gone by now). Spawn
  // mode's reaper may have collected it already (ECHILD): nothing to wait for.
  while (::waitpid(pid_, nullptr, 0) < 0 && errno == EINTR) {
  }
}

}  // namespace pillbox
