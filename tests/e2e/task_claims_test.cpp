// Two runs on one store never run a task twice at once (issue 14, point 10):
// a run claims each task before its attempt starts (host, pid, start time,
// boot), another run skips a task a live process claimed as "running
// elsewhere" (exit 5), and a claim left by a run killed with SIGKILL is
// taken over by the next run.
#include <doctest/doctest.h>
#include <signal.h>
#include <sys/timerfd.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <filesystem>
#include <nlohmann/json.hpp>
#include <set>
#include <sstream>
#include <string>
#include <vector>

#include "tests/e2e/background.h"
#include "tests/e2e/support.h"

using e2e::run_pillbox;
using e2e::sql_int;

namespace {

// Payloads starting with "slow" mark themselves started (started.<payload>)
// and wait for GO in `work`; every task then echoes its payload.
std::vector<std::string> gated_echo(const e2e::TempDir& work) {
  const std::string w = work.path();
  return {"--", "/bin/sh", "-c",
          "p=$(cat); case \"$p\" in slow*) touch \"" + w + "/started.$p\"; while [ ! -e \"" + w +
              "/GO\" ]; do sleep 0.02; done;; esac; printf '%s' \"$p\""};
}

std::size_t started_count(const std::string& dir) {
  std::size_t n = 0;
  std::error_code ec;
  for (const auto& e : std::filesystem::directory_iterator(dir, ec)) {
    n += e.path().filename().string().rfind("started.", 0) == 0 ? 1 : 0;
  }
  return n;
}

// A file descriptor that becomes readable after `seconds`: the limit of a wait.
int deadline_fd(int seconds) {
  const int fd = ::timerfd_create(CLOCK_MONOTONIC, TFD_CLOEXEC);
  REQUIRE(fd >= 0);
  itimerspec when{};
  when.it_value.tv_sec = seconds;
  REQUIRE(::timerfd_settime(fd, 0, &when, nullptr) == 0);
  return fd;
}

// Blocks until `work` holds `count` started marks (at most two minutes).
bool wait_for_started(const e2e::TempDir& work, std::size_t count) {
  const int limit = deadline_fd(120);
  const bool done = e2e::wait_in_dir(work.path(), [&] { return started_count(work.path()) >= count; }, limit);
  ::close(limit);
  return done;
}

std::vector<nlohmann::json> json_lines(const std::string& text) {
  std::vector<nlohmann::json> out;
  std::istringstream lines(text);
  for (std::string line; std::getline(lines, line);) {
    if (!line.empty()) out.push_back(nlohmann::json::parse(line));
  }
  return out;
}


// One task's store: `args` runs it (echo, --json); `claim` makes its row
// pending and claimed by that token, as a run that did not finish leaves it.
struct ClaimedTask {
  e2e::TempDir dir;
  std::string store = dir.path() + "/store";
  std::string db = store + "/pillbox.db";
  std::vector<std::string> args = {"run", "--store", store, "--handler", "echo", "--json", dir.write("job", "payload")};
  ClaimedTask() { REQUIRE(run_pillbox(args).exit_code == 0); }
  void claim(const std::string& token) {
    std::string quoted;
    for (char c : token) quoted += c == '\'' ? std::string("''") : std::string(1, c);
    e2e::sql_write(db, "UPDATE tasks SET state = 'pending', claim = '" + quoted + "'");
  }
};

}  // namespace

TEST_CASE("two runs started together over 600 inputs: no task runs in both, every task runs once") {
  e2e::TempDir dir;
  e2e::TempDir work(0777);
  e2e::TempDir inputs;
  // 600 inputs, every 50th slow: each run fills its 3 slots with slow tasks
  // and waits there, so both are surely running at once when the gate opens.
  for (int i = 0; i < 600; ++i) {
    char name[32];
    std::snprintf(name, sizeof name, "in-%03d", i);
    inputs.write(name, (i % 50 == 7 ? "slow-" : "fast-") + std::to_string(i));
  }
  const std::string store = dir.path() + "/store";
  const std::string db = store + "/pillbox.db";
  // The store exists before both start (as it does for cron jobs after the first).
  REQUIRE(run_pillbox({"run", "--store", store, "--handler", "echo", dir.write("warm", "x")}).exit_code == 0);
  // --timeout: a slow task waits for GO longer than the policy's 30 s on a busy host.
  std::vector<std::string> args = {"run", "--store", store, "--jobs", "3", "--json", "--timeout", "300s", "--writable",
                                   work.path(), inputs.path()};
  for (const auto& a : gated_echo(work)) args.push_back(a);
  e2e::Background a(e2e::pillbox_binary(), args);
  e2e::Background b(e2e::pillbox_binary(), args);
  // Six slow tasks started: three in each run (a run has three slots), so
  // both run now, and the later one passed over the earlier one's.
  const bool both_waiting = wait_for_started(work, 6);
  REQUIRE_MESSAGE(both_waiting, "A: " << a.err() << "\nB: " << b.err());
  work.write("GO", "");
  const int exit_a = a.wait(std::chrono::minutes(5));
  const int exit_b = b.wait(std::chrono::minutes(5));
  INFO("A exit " << exit_a << ": " << a.err());
  INFO("B exit " << exit_b << ": " << b.err());

  std::set<std::string> ok_a, ok_b;
  std::size_t elsewhere = 0;
  for (auto [run, ok] : {std::pair{&a, &ok_a}, std::pair{&b, &ok_b}}) {
    for (const auto& rec : json_lines(run->out())) {
      if (rec["verdict"] == "ok") ok->insert(rec["key"].get<std::string>());
      if (rec["verdict"] == "skipped" &&
          rec["verdict_reason"].get<std::string>().find("running elsewhere") != std::string::npos) {
        ++elsewhere;
      }
    }
  }
  std::size_t both = 0;
  for (const auto& key : ok_a) both += ok_b.count(key);
  CHECK(both == 0);
  CHECK(ok_a.size() + ok_b.size() == 600);
  // Each task ran exactly once in all: one attempt each, none left claimed.
  CHECK(sql_int(db, "SELECT count(*) FROM tasks WHERE job <> 'echo'") == 600);
  CHECK(sql_int(db, "SELECT count(*) FROM tasks WHERE job <> 'echo' AND state = 'ok'") == 600);
  CHECK(sql_int(db, "SELECT count(*) FROM attempts a JOIN tasks t ON t.id = a.task_id WHERE t.job <> 'echo'") == 600);
  CHECK(sql_int(db, "SELECT count(*) FROM tasks WHERE claim IS NOT NULL") == 0);
  // The run that passed over the other's tasks says so, and does not exit 0.
  CHECK(elsewhere >= 3);
  const bool a_says = a.err().find("running elsewhere") != std::string::npos;
  const bool b_says = b.err().find("running elsewhere") != std::string::npos;
  CHECK((a_says || b_says));
  CHECK(exit_a == (a_says ? 5 : 0));
  CHECK(exit_b == (b_says ? 5 : 0));
}

TEST_CASE("a live run's claim is respected; the claim a SIGKILLed run left is taken over by the next run") {
  e2e::TempDir dir;
  e2e::TempDir work(0777);
  const std::string store = dir.path() + "/store";
  const std::string db = store + "/pillbox.db";
  const std::string input = dir.write("job", "slow-1");
  std::vector<std::string> args = {"run",       "--store", store,       "--jobs", "1", "--json", "--timeout", "300s",
                                   "--writable", work.path(), input};
  for (const auto& a : gated_echo(work)) args.push_back(a);
  e2e::Background first(e2e::pillbox_binary(), args);
  REQUIRE_MESSAGE(wait_for_started(work, 1), first.err());
  CHECK(sql_int(db, "SELECT count(*) FROM tasks WHERE claim LIKE '%:" + std::to_string(first.pid()) + ":%'") == 1);

  // While it runs, the task is pending and claimed by that run.
  const auto view = run_pillbox({"tasks", "--store", store, "--json"});
  INFO(view.describe());
  REQUIRE(view.records.size() == 1);
  CHECK(view.records[0]["state"] == "pending");
  CHECK(view.records[0]["last_kind"] == "unfinished");
  CHECK(view.records[0]["claimed_by"].get<std::string>().find(":" + std::to_string(first.pid()) + ":") !=
        std::string::npos);

  // A second run meanwhile leaves it to the first: not run, not ok, exit 5.
  // (Were the claim ignored, this run would wait for GO too: a deadline.)
  const auto second = run_pillbox(args, "", {}, {}, 120);
  INFO(second.describe());
  CHECK(second.exit_code == 5);
  REQUIRE(second.records.size() == 1);
  CHECK(second.records[0]["verdict"] == "skipped");
  CHECK(second.records[0]["verdict_reason"].get<std::string>().find("running elsewhere") != std::string::npos);
  CHECK(second.err.find("1 running elsewhere") != std::string::npos);
  CHECK(sql_int(db, "SELECT count(*) FROM attempts") == 1);

  // SIGKILL: nothing releases the claim...
  first.signal(SIGKILL);
  CHECK(first.wait() == 128 + SIGKILL);
  CHECK(sql_int(db, "SELECT count(*) FROM tasks WHERE claim IS NOT NULL") == 1);
  // ...and the next run takes it over: its process is gone.
  work.write("GO", "");
  const auto third = run_pillbox(args);
  INFO(third.describe());
  CHECK(third.exit_code == 0);
  REQUIRE(third.records.size() == 1);
  CHECK(third.records[0]["verdict"] == "ok");
  CHECK(third.err.find("running elsewhere") == std::string::npos);
  CHECK(sql_int(db, "SELECT count(*) FROM tasks WHERE claim IS NOT NULL") == 0);
  CHECK(sql_int(db, "SELECT count(*) FROM attempts") == 2);
}

TEST_CASE("a claim whose pid now belongs to another process, or to another boot, is taken over") {
  ClaimedTask task;
  char host[256] = {};
  ::gethostname(host, sizeof host - 1);
  const std::string boot = e2e::read_file("/proc/sys/kernel/random/boot_id");
  const std::string boot_id = boot.substr(0, boot.find('\n'));
  // pid 1 lives, but it did not start at tick 1; this test process lives, but
  // in another boot; and text that is no claim at all.
  for (const std::string& claim : {std::string(host) + ":1:1:" + boot_id,
                                  std::string(host) + ":" + std::to_string(::getpid()) + ":1:not-this-boot",
                                  std::string("'; DROP TABLE tasks; --"), std::string("\x1b]0;owned\x07")}) {
    task.claim(claim);
    const auto r = run_pillbox(task.args);
    INFO(claim << ": " << r.describe());
    CHECK(r.exit_code == 0);
    REQUIRE(r.records.size() == 1);
    CHECK(r.records[0]["verdict"] == "ok");
  }
  CHECK(sql_int(task.db, "SELECT count(*) FROM tasks WHERE claim IS NOT NULL") == 0);
}

TEST_CASE("a claim made on another host is respected until tasks --release-claims HOST forgets it; this host's cannot be") {
  ClaimedTask task;
  const std::string& store = task.store;
  // A container's former hostname: its run is gone, nothing here can tell.
  task.claim("old-container:4242:999:some-boot");
  const auto skipped = run_pillbox(task.args);
  INFO(skipped.describe());
  CHECK(skipped.exit_code == 5);
  CHECK(skipped.err.find("--release-claims HOST") != std::string::npos);
  char host[256] = {};
  ::gethostname(host, sizeof host - 1);
  const auto own = run_pillbox({"tasks", "--store", store, "--release-claims", host});
  INFO(own.describe());
  CHECK(own.exit_code == 2);
  CHECK(sql_int(task.db, "SELECT count(*) FROM tasks WHERE claim IS NOT NULL") == 1);
  const auto bad = run_pillbox({"tasks", "--store", store, "--release-claims", "old-container:4242"});
  CHECK(bad.exit_code == 2);
  const auto released = run_pillbox({"tasks", "--store", store, "--release-claims", "old-container"});
  INFO(released.describe());
  CHECK(released.exit_code == 0);
  CHECK(released.err.find("released 1 claim of host 'old-container'") != std::string::npos);
  CHECK(sql_int(task.db, "SELECT count(*) FROM tasks WHERE claim IS NOT NULL") == 0);
  const auto ran = run_pillbox(task.args);
  INFO(ran.describe());
  CHECK(ran.exit_code == 0);
  REQUIRE(ran.records.size() == 1);
  CHECK(ran.records[0]["verdict"] == "ok");
}
