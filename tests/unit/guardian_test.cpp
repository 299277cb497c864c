// The guardian and the root sweep of a uid, against processes that fight
// back (box_attack_test.cpp has the end-to-end cases). Root only: the
// processes run under uids far from the shipped policies' pool, so a
// pillbox run beside these tests keeps its own.
#include <doctest/doctest.h>
#include <poll.h>
#include <signal.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include "shared/uid_sweep.h"
#include "supervisor/exec/guardian.h"

namespace pillbox {
namespace {

constexpr std::uint32_t kUid = 2147480100;

// Forks a process that becomes `uid` and then runs `body`; returns once it
// has the uid (or has died trying).
template <class Body>
pid_t start_as(std::uint32_t uid, Body body) {
  int ready[2];
  if (::pipe(ready) != 0) return -1;
  const pid_t pid = ::fork();
  if (pid == 0) {
    ::close(ready[0]);
    if (::setresgid(uid, uid, uid) != 0 || ::setresuid(uid, uid, uid) != 0) _exit(1);
    (void)!::write(ready[1], "x", 1);
    ::close(ready[1]);
    body();
    _exit(0);
  }
  ::close(ready[1]);
  char c;
  (void)!::read(ready[0], &c, 1);
  ::close(ready[0]);
  return pid;
}

// A process of kUid that sends SIGSTOP to every other process of kUid
// without pause (a leftover of a task that fights whoever comes to kill it).
pid_t start_stopper() {
  return start_as(kUid, [] {
    for (;;) ::kill(-1, SIGSTOP);
  });
}

// Waits for `pid` (a child) to exit, at most `ms`; true when it did (reaped).
bool exits_within(pid_t pid, int ms) {
  const int fd = static_cast<int>(::syscall(SYS_pidfd_open, pid, 0));
  if (fd < 0) return false;
  pollfd p{fd, POLLIN, 0};
  const bool exited = ::poll(&p, 1, ms) == 1;
  ::close(fd);
  if (exited) ::waitpid(pid, nullptr, 0);
  return exited;
}

}  // namespace

TEST_CASE("guardian: a leftover that SIGSTOPs its uid neither stops the sweep nor makes the guardian wait forever") {
  if (::geteuid() != 0) {
    MESSAGE("skipped: needs root (processes under another uid)");
    return;
  }
  // Before the fix, the guardian's helper (which takes the uid to kill with
  // kill(-1)) was stopped in about one round in three, and the guardian,
  // and whoever waited for it, waited forever.
  for (int round = 0; round < 10; ++round) {
    CAPTURE(round);
    const pid_t stopper = start_stopper();
    REQUIRE(stopper > 0);
    // The guardian is forked from a helper, so that a guardian that never
    // ends fails this test instead of hanging it.
    const pid_t helper = ::fork();
    if (helper == 0) {
      {
        GuardianTargets targets;
        targets.uids = {kUid};
        auto guardian = Guardian::start(targets);
        if (!guardian) _exit(2);
      }  // ends the guard: sweep, then wait for the guardian
      _exit(0);
    }
    REQUIRE(helper > 0);
    const bool ended = exits_within(helper, 10'000);
    if (!ended) {
      sweep_uids(&kUid, 1, 1000);  // frees the stopped helper, so the guardian and this helper can end
      ::kill(helper, SIGKILL);
      ::waitpid(helper, nullptr, 0);
    }
    CHECK_MESSAGE(ended, "the guardian did not finish within 10 s");
    CHECK_MESSAGE(exits_within(stopper, 2000), "the stopper survived the guardian");
    ::kill(stopper, SIGKILL);
    ::waitpid(stopper, nullptr, WNOHANG);
    if (!ended) break;
  }
}

TEST_CASE("sweep_uids: kills every process of the uid, a forking one included, and nothing else") {
  if (::geteuid() != 0) {
    MESSAGE("skipped: needs root (processes under another uid)");
    return;
  }
  const pid_t other = start_as(kUid + 1, [] {  // another uid: must survive
    for (;;) ::pause();
  });
  const pid_t forker = start_as(kUid, [] {
    for (;;) {
      const pid_t c = ::fork();  // children that exit at once, and a parent that never stops
      if (c == 0) _exit(0);
      if (c > 0) ::waitpid(c, nullptr, 0);
    }
  });
  const pid_t stopper = start_stopper();
  bool clear = false;
  CHECK(sweep_uids(&kUid, 1, 1000, &clear) >= 2);
  CHECK(clear);
  CHECK(exits_within(forker, 2000));
  CHECK(exits_within(stopper, 2000));
  CHECK_FALSE(exits_within(other, 0));
  ::kill(other, SIGKILL);
  ::waitpid(other, nullptr, 0);
}

}  // namespace pillbox
