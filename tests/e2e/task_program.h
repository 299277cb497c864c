#pragma once
// The task program of the tests that kill workers while a payload runs
// (amqp_chaos_test.cpp, amqp_suspect_test.cpp): a copy of the mixed_poison
// fixture under a name of its own, so that its processes can be found and
// told apart from every other test's.
#include <signal.h>
#include <sys/stat.h>

#include <chrono>
#include <filesystem>
#include <string>
#include <vector>

#include <doctest/doctest.h>

#include "tests/e2e/background.h"
#include "tests/e2e/support.h"

namespace e2e {

// The task program: a copy of mixed_poison under a name of its own (15
// characters at most: a process's comm), in a directory tasks see as the
// host's (not under /tmp, which each task gets privately). Removed at the
// end of the scope.
class PoisonCopy {
 public:
  explicit PoisonCopy(const std::string& name) : dir_(0755, host_dir_tasks_see()) {
    path_ = dir_.file(name);
    std::filesystem::copy_file(fixture("mixed_poison"), path_);
    REQUIRE(::chmod(path_.c_str(), 0755) == 0);
  }
  const std::string& path() const { return path_; }

 private:
  TempDir dir_;
  std::string path_;
};

// The live (not zombie) processes running `program`.
inline std::vector<pid_t> running_tasks(const std::string& program) {
  std::vector<pid_t> pids;
  for (const auto& p : processes_of(program)) {
    if (p.state != 'Z') pids.push_back(p.pid);
  }
  return pids;
}

// No process of the task program outlives its worker: a SIGKILLed worker's
// children are killed by its guardian, within about 2 s (waited for with
// pidfds).
inline void check_no_task_left(const std::string& program) {
  const auto left = still_running_after(running_tasks(program), std::chrono::seconds(10));
  CHECK_MESSAGE(left.empty(), "left running: " << describe(processes_of(program)));
}

// What a payload that kills its worker's supervisor does, played by the
// test (the sandbox keeps a task from signalling its worker): SIGKILL of
// worker `w` while `task` (its task's processes) runs; they die with it.
inline void kill_worker_with(Background& w, const std::vector<pid_t>& task) {
  w.signal(SIGKILL);
  CHECK(w.wait() == 128 + SIGKILL);
  CHECK_MESSAGE(still_running_after(task, std::chrono::seconds(10)).empty(), "the killed worker's task still runs");
}

}  // namespace e2e
