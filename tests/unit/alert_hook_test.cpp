// The --on-quarantine hook: real /bin/sh hooks that succeed, fail, hang,
// ignore their input or pile up, and a caller that must never wait on them.
#include <doctest/doctest.h>
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>

#include "shared/unique_fd.h"
#include "supervisor/flow/alert_hook.h"
#include "tests/unit/scratch_dir.h"

using namespace pillbox;
using namespace std::chrono_literals;
using Clock = std::chrono::steady_clock;

namespace {

std::string slurp(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::ostringstream s;
  s << in.rdbuf();
  return s.str();
}

long long ms_since(Clock::time_point start) {
  return std::chrono::duration_cast<std::chrono::milliseconds>(Clock::now() - start).count();
}

bool mentions(const std::vector<std::string>& lines, const std::string& what) {
  for (const std::string& l : lines) {
    if (l.find(what) != std::string::npos) return true;
  }
  return false;
}

HookSettings hook(std::string command, std::chrono::milliseconds timeout = 10s, std::size_t max_queued = 1000) {
  HookSettings s;
  s.command = std::move(command);
  s.timeout = timeout;
  s.max_queued = max_queued;
  return s;
}

// True when `pid` no longer runs: reaped, or a zombie waiting for whichever
// process it was reparented to.
bool not_running(pid_t pid) {
  if (::kill(pid, 0) != 0 && errno == ESRCH) return true;
  std::ifstream stat("/proc/" + std::to_string(pid) + "/stat");
  std::string line;
  if (!std::getline(stat, line)) return true;
  const auto paren = line.rfind(')');
  return paren != std::string::npos && paren + 2 < line.size() && line[paren + 2] == 'Z';
}

// Sets an environment variable for one scope, restoring the old value.
struct EnvVar {
  std::string name;
  std::string old;
  bool had;
  EnvVar(const char* n, const char* value) : name(n), had(std::getenv(n) != nullptr) {
    if (had) old = std::getenv(n);
    ::setenv(n, value, 1);
  }
  ~EnvVar() {
    if (had) ::setenv(name.c_str(), old.c_str(), 1);
    else ::unsetenv(name.c_str());
  }
};

}  // namespace

TEST_CASE("hook: each record reaches the hook's stdin byte for byte, one hook at a time, in order") {
  pillbox::test::ScratchDir s{"hook-test"};
  const std::string out = s.path + "/out";
  AlertHook h(hook("cat >> " + out + "; printf '\\n--\\n' >> " + out));
  const std::string records[] = {
      R"({"fingerprint":"pb1-aaaa","key":"a b\tc","note":"caf\u00e9 \"quoted\""})",
      "{\"fingerprint\":\"pb1-bbbb\",\"raw\":\"\xc3\xa9\\n\"}",
      R"({"fingerprint":"pb1-cccc","kind":"crash"})",
  };
  for (const std::string& r : records) h.fire(r);
  h.finish(10s);
  CHECK(slurp(out) == records[0] + "\n--\n" + records[1] + "\n--\n" + records[2] + "\n--\n");
  CHECK(h.fired() == 3);
  CHECK(h.succeeded() == 3);
  CHECK(h.failed() == 0);
  CHECK(h.dropped() == 0);
  CHECK(h.problems().empty());
}

TEST_CASE("hook: a hook that exits 3 is one failure with its status, and the caller carries on") {
  AlertHook h(hook("exit 3"));
  h.fire("{}");
  h.finish(10s);
  CHECK(h.fired() == 1);
  CHECK(h.succeeded() == 0);
  CHECK(h.failed() == 1);
  const auto problems = h.problems();
  REQUIRE(problems.size() == 1);
  CHECK(problems[0] == "hook 'exit 3' exited with status 3");
}

TEST_CASE("hook: a command that does not exist is status 127 from the shell") {
  AlertHook h(hook("/nonexistent/hook"));
  h.fire("{}");
  h.finish(10s);
  CHECK(h.failed() == 1);
  CHECK(h.succeeded() == 0);
  REQUIRE(h.problems().size() == 1);
  CHECK(h.problems()[0] == "hook '/nonexistent/hook' exited with status 127");
}

TEST_CASE("hook: a hook that hangs is killed at its timeout with everything it started") {
  pillbox::test::ScratchDir s{"hook-test"};
  const std::string fifo = s.path + "/pids";
  REQUIRE(::mkfifo(fifo.c_str(), 0600) == 0);
  // Opened before the hook starts, so the hook's open for writing never blocks;
  // a FIFO that never had a writer polls as not ready, not as hung up.
  UniqueFd reader(::open(fifo.c_str(), O_RDONLY | O_NONBLOCK | O_CLOEXEC));
  REQUIRE(reader.valid());

  AlertHook h(hook("sleep 1000 & echo $$ $! > " + fifo + "; wait", 200ms));
  const auto fire_start = Clock::now();
  h.fire(R"({"key":"hang"})");
  CHECK(ms_since(fire_start) < 50);

  pollfd pfd{reader.get(), POLLIN, 0};
  REQUIRE(::poll(&pfd, 1, 5000) == 1);
  char buf[64] = {};
  REQUIRE(::read(reader.get(), buf, sizeof buf - 1) > 0);
  int shell = 0, sleeper = 0;
  REQUIRE(std::sscanf(buf, "%d %d", &shell, &sleeper) == 2);
  // Watched through pidfds, so "gone" below is the kernel's word, not a guess.
  UniqueFd shell_fd(static_cast<int>(::syscall(SYS_pidfd_open, shell, 0)));
  UniqueFd sleeper_fd(static_cast<int>(::syscall(SYS_pidfd_open, sleeper, 0)));

  const auto finish_start = Clock::now();
  h.finish(10s);
  CHECK(ms_since(finish_start) < 3000);
  CHECK(h.failed() == 1);
  CHECK(h.succeeded() == 0);
  REQUIRE(h.problems().size() == 1);
  CHECK(h.problems()[0] == "hook 'sleep 1000 & echo $$ $! > " + fifo + "; wait' killed after 200 ms timeout");

  for (const UniqueFd* fd : {&shell_fd, &sleeper_fd}) {
    if (!fd->valid()) continue;  // already gone when we looked
    pollfd exited{fd->get(), POLLIN, 0};
    CHECK(::poll(&exited, 1, 2000) == 1);
  }
  errno = 0;
  CHECK(::kill(shell, 0) == -1);  // reaped by the hook thread
  CHECK(errno == ESRCH);
  CHECK(not_running(sleeper));
}

TEST_CASE("hook: a hook that never reads its 1 MiB of input still completes") {
  pillbox::test::ScratchDir s{"hook-test"};
  const std::string json = "{\"blob\":\"" + std::string(1024 * 1024 - 11, 'x') + "\"}";
  REQUIRE(json.size() == 1024 * 1024);
  AlertHook ignoring(hook("exit 0"));
  ignoring.fire(json);
  ignoring.finish(10s);
  CHECK(ignoring.succeeded() == 1);

  AlertHook reading(hook("wc -c > " + s.path + "/n"));
  reading.fire(json);
  reading.finish(10s);
  CHECK(reading.succeeded() == 1);
  CHECK(std::stol(slurp(s.path + "/n")) == 1024 * 1024);
}

TEST_CASE("hook: records beyond max_queued are dropped and counted, and fire() never waits") {
  AlertHook h(hook("sleep 0.2", 10s, 2));
  const auto start = Clock::now();
  for (int i = 0; i < 10; ++i) h.fire("{\"n\":" + std::to_string(i) + "}");
  CHECK(ms_since(start) < 50);
  h.finish(10s);
  CHECK(h.fired() == 10);
  // Two wait in the queue, and the hook thread may have taken one already.
  CHECK(h.dropped() >= 7);
  CHECK(h.dropped() <= 8);
  CHECK(h.failed() == 0);
  CHECK(h.succeeded() + h.failed() + h.dropped() == h.fired());
  CHECK(mentions(h.problems(), "records dropped: 2 were already waiting for the hook"));
}

TEST_CASE("hook: finish() kills the running hook when its grace runs out and drops the rest") {
  AlertHook h(hook("sleep 1000", 60s));
  for (int i = 0; i < 3; ++i) h.fire("{}");
  const auto start = Clock::now();
  h.finish(200ms);
  CHECK(ms_since(start) < 3000);
  CHECK(h.failed() == 1);
  CHECK(h.dropped() == 2);
  CHECK(h.succeeded() + h.failed() + h.dropped() == h.fired());
  CHECK(mentions(h.problems(), "killed: the run ended before it finished"));
  CHECK(mentions(h.problems(), "2 records not delivered"));

  h.fire("{}");  // after finish: dropped, never run
  CHECK(h.dropped() == 3);
  CHECK(h.fired() == 4);
  h.finish(10s);  // again: nothing to do
}

TEST_CASE("hook: destroying an unfinished hook does not wait for a hanging command") {
  const auto start = Clock::now();
  {
    AlertHook h(hook("sleep 1000", 60s));
    h.fire("{}");
  }
  CHECK(ms_since(start) < 3000);
}

TEST_CASE("hook: the environment is the supervisor's plus PILLBOX_HOOK=1; stdout, signals and fds are clean") {
  pillbox::test::ScratchDir s{"hook-test"};
  EnvVar var("PILLBOX_HOOK_TEST_VAR", "inherited");
  // What a hook must not inherit: an ignored SIGPIPE and an fd without close-on-exec.
  const auto old_pipe = ::signal(SIGPIPE, SIG_IGN);
  UniqueFd leaky(::open("/dev/null", O_RDONLY));
  REQUIRE(leaky.valid());
  const std::string n = std::to_string(leaky.get());

  const std::string d = s.path;
  AlertHook h(hook("echo \"$PILLBOX_HOOK $PILLBOX_HOOK_TEST_VAR\" > " + d + "/env; "
                   "readlink /proc/self/fd/9 9>&1 > " + d + "/stdout; "
                   "if [ -e /proc/$$/fd/" + n + " ]; then echo open; else echo closed; fi > " + d + "/fd; "
                   "grep SigIgn /proc/self/status > " + d + "/sigign; "
                   "echo this goes nowhere"));
  h.fire("{}");
  h.finish(10s);
  ::signal(SIGPIPE, old_pipe);

  CHECK(h.succeeded() == 1);
  CHECK(slurp(d + "/env") == "1 inherited\n");
  CHECK(slurp(d + "/stdout") == "/dev/null\n");
  CHECK(slurp(d + "/fd") == "closed\n");
  const std::string sigign = slurp(d + "/sigign");
  REQUIRE(sigign.rfind("SigIgn:", 0) == 0);
  const unsigned long long ignored = std::stoull(sigign.substr(7), nullptr, 16);
  CHECK((ignored & (1ULL << (SIGPIPE - 1))) == 0);
}
