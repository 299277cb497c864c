#pragma once
// Runs a piece of a test in a forked child with a time limit, for code
// that might crash or hang the test program when it is wrong (an attack
// test must fail, not take the suite down or wait for ever). Header-only:
// the unit and the end-to-end tests both use it.
#include <doctest/doctest.h>
#include <poll.h>
#include <signal.h>
#include <sys/resource.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <exception>
#include <functional>
#include <string>

namespace test_support {

struct ChildRun {
  bool finished = false;  // exited by itself, status 0
  bool killed_by_signal = false;
  int signal = 0;
  bool timed_out = false;
  double seconds = 0;
  std::string said;  // what `body` returned (or what it threw)
};

// `body` in a child process, killed after `limit`; waited for on a pidfd
// (no polling). A crash ends the child as a crash, without a core dump.
inline ChildRun in_child(std::chrono::milliseconds limit, const std::function<std::string()>& body) {
  int fds[2];
  REQUIRE(::pipe(fds) == 0);
  const auto started = std::chrono::steady_clock::now();
  const pid_t pid = ::fork();
  REQUIRE(pid >= 0);
  if (pid == 0) {
    ::close(fds[0]);
    for (const int sig : {SIGSEGV, SIGBUS, SIGABRT, SIGFPE, SIGILL}) ::signal(sig, SIG_DFL);
    const rlimit no_core{0, 0};
    ::setrlimit(RLIMIT_CORE, &no_core);
    std::string out;
    try {
      out = body();
    } catch (const std::exception& e) {
      out = std::string("threw: ") + e.what();
    } catch (...) {
      out = "threw (a failed REQUIRE in the child?)";
    }
    (void)!::write(fds[1], out.data(), out.size());
    ::_exit(0);
  }
  ::close(fds[1]);
  ChildRun run;
  const int pidfd = static_cast<int>(::syscall(SYS_pidfd_open, pid, 0));
  REQUIRE(pidfd >= 0);
  pollfd p{pidfd, POLLIN, 0};
  int ready = 0;
  while ((ready = ::poll(&p, 1, static_cast<int>(limit.count()))) < 0 && errno == EINTR) {
  }
  ::close(pidfd);
  if (ready == 0) {
    run.timed_out = true;
    ::kill(pid, SIGKILL);  // the child this test forked
  }
  int status = 0;
  while (::waitpid(pid, &status, 0) < 0 && errno == EINTR) {
  }
  run.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - started).count();
  run.finished = WIFEXITED(status) && WEXITSTATUS(status) == 0;
  run.killed_by_signal = WIFSIGNALED(status);
  run.signal = run.killed_by_signal ? WTERMSIG(status) : 0;
  char buf[4096];
  for (ssize_t n; (n = ::read(fds[0], buf, sizeof buf)) > 0;) run.said.append(buf, static_cast<std::size_t>(n));
  ::close(fds[0]);
  return run;
}

}  // namespace test_support
