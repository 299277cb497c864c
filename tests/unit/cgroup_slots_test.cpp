// The slot cgroups' control files are kept open and read with pread at
// offset 0 (supervisor/exec/cgroups.h): on the real cgroups of this host,
// what kill_all reads shows what is in the group now, not what was there
// at the last read (v1's cgroup.procs would not: its pid list is kept a
// second per open file), and a slot made anew (renew_if_charged) is read
// through its new files, not the old group's.
#include <doctest/doctest.h>
#include <poll.h>
#include <signal.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdio>
#include <fstream>
#include <string>

#include "shared/policy.h"
#include "supervisor/exec/cgroups.h"

namespace pillbox {
namespace {

// A process that waits to be killed, put into the cgroups whose
// cgroup.procs files are `procs` by the test before anything is read.
struct Sleeper {
  pid_t pid = -1;
  explicit Sleeper(const std::vector<std::string>& procs, const char* shm_file = nullptr) {
    int ready[2];
    REQUIRE(::pipe(ready) == 0);
    pid = ::fork();
    REQUIRE(pid >= 0);
    if (pid == 0) {
      ::close(ready[0]);
      for (const auto& f : procs) {
        std::FILE* out = std::fopen(f.c_str(), "we");
        if (out == nullptr || std::fputs("0", out) < 0 || std::fclose(out) != 0) ::_exit(2);
      }
      // Charged to the memory group that wrote it (tmpfs pages), as a task's
      // file left in /dev/shm is.
      if (shm_file != nullptr) {
        std::FILE* shm = std::fopen(shm_file, "we");
        if (shm == nullptr) ::_exit(3);
        for (int i = 0; i < 64; ++i) std::fputs(std::string(4096, 'x').c_str(), shm);
        std::fclose(shm);
      }
      if (::write(ready[1], "r", 1) != 1) ::_exit(4);
      for (;;) ::pause();
    }
    ::close(ready[1]);
    char c = 0;
    const bool joined = ::read(ready[0], &c, 1) == 1;
    ::close(ready[0]);
    REQUIRE_MESSAGE(joined, "the child could not join the slot's groups");
  }
  // The signal that ended the process; -1 when it still runs 10 s on (the
  // kill it waits for was never sent).
  int wait_signal() {
    const int pidfd = static_cast<int>(::syscall(SYS_pidfd_open, pid, 0));
    REQUIRE(pidfd >= 0);
    pollfd p{pidfd, POLLIN, 0};
    const int ready = ::poll(&p, 1, 10'000);
    ::close(pidfd);
    if (ready != 1) return -1;
    int status = 0;
    REQUIRE(::waitpid(pid, &status, 0) == pid);
    pid = -1;
    return WIFSIGNALED(status) ? WTERMSIG(status) : 0;
  }
  ~Sleeper() {
    if (pid > 0) {
      ::kill(pid, SIGKILL);
      ::waitpid(pid, nullptr, 0);
    }
  }
};

std::unique_ptr<CgroupSlots> make_slots() {
  Limits limits;
  limits.memory_bytes = 256ull << 20;
  limits.processes = 64;
  auto slots = CgroupSlots::create(probe_cgroups(), 1, limits);
  REQUIRE_MESSAGE(slots.has_value(), (slots ? "" : slots.error()));
  return std::move(*slots);
}

bool can_make_cgroups() {
  if (::geteuid() != 0 || probe_cgroups().memory_parent.empty()) {
    MESSAGE("skipped: needs root and a memory cgroup this process may create groups in");
    return false;
  }
  return true;
}

TEST_CASE("cgroup slots: the kept cgroup.procs shows a process that joined after it was opened, and kill_all kills it") {
  if (!can_make_cgroups()) return;
  auto slots = make_slots();
  // Read once while empty: the kept file has been read to its end.
  slots->kill_all(0);
  Sleeper sleeper(slots->procs_files(0));
  slots->kill_all(0);
  CHECK(sleeper.wait_signal() == SIGKILL);
  CHECK(slots->oom_kills(0) == 0);
}

TEST_CASE("cgroup slots: a slot made anew for its tmpfs pages is read through its new files") {
  if (!can_make_cgroups()) return;
  auto slots = make_slots();
  const std::string shm = "/dev/shm/pillbox-cgroup-slots-test-" + std::to_string(::getpid());
  {
    Sleeper charger(slots->procs_files(0), shm.c_str());
    slots->kill_all(0);
    CHECK(charger.wait_signal() == SIGKILL);
  }
  const bool renewed = slots->renew_if_charged(0);
  ::unlink(shm.c_str());
  REQUIRE_MESSAGE(renewed, "the slot's memory group held tmpfs pages and was not made anew");
  // The old group's files read nothing now: a kill_all through them would
  // take the new group for empty and leave this process running.
  Sleeper sleeper(slots->procs_files(0));
  slots->kill_all(0);
  CHECK(sleeper.wait_signal() == SIGKILL);
  CHECK_FALSE(slots->renew_if_charged(0));
}

}  // namespace
}  // namespace pillbox
