#pragma once
// A pillbox (or any program) running in the background while the test acts
// on it: started now, its stdout and stderr kept in files, signalled and
// waited for by the test. For workers killed mid-task and servers restarted.
#include <sys/types.h>

#include <chrono>
#include <functional>
#include <map>
#include <string>
#include <vector>

#include "tests/e2e/support.h"

namespace e2e {

class Background {
 public:
  // Starts `program` with `args` (stdin: /dev/null); the environment is the
  // test's plus `extra_env`. It dies with the test (PDEATHSIG). `in_child`,
  // when given, runs in the child once stdin, stdout and stderr are set, just
  // before the exec (more descriptors for the program): async-signal-safe
  // calls only, and _exit(127) on failure.
  Background(const std::string& program, const std::vector<std::string>& args,
             const std::map<std::string, std::string>& extra_env = {},
             const std::function<void()>& in_child = {});
  ~Background();  // SIGKILL and reap, when still running
  Background(const Background&) = delete;
  Background& operator=(const Background&) = delete;

  pid_t pid() const { return pid_; }
  bool running() const { return pid_ > 0 && !reaped_; }
  // True once it has ended (then reaped: wait() returns its status at once);
  // does not wait.
  bool ended();
  void signal(int sig) const;
  // Waits for it to end (at most `limit`; then SIGKILL and a failed check).
  // The exit code, or 128 + the signal that ended it.
  int wait(std::chrono::milliseconds limit = std::chrono::seconds(120));
  // What it wrote so far. No doctest assertion inside: these are meant for
  // INFO and REQUIRE_MESSAGE, which evaluate them while doctest's reporter
  // holds its lock (an assertion there deadlocks).
  std::string out() const { return contents(dir_.file("out")); }
  std::string err() const { return contents(dir_.file("err")); }

 private:
  static std::string contents(const std::string& path);
  TempDir dir_;
  pid_t pid_ = -1;
  bool reaped_ = false;
  int status_ = 0;
};

// Polls `done` every `every` until it holds or `limit` passes: for state
// kept in another process (Redis) that offers nothing to block on.
bool eventually(const std::function<bool()>& done, std::chrono::milliseconds limit = std::chrono::seconds(60),
                std::chrono::milliseconds every = std::chrono::milliseconds(20));

}  // namespace e2e
