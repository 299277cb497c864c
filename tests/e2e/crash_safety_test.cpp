// Nothing lost (issue 3): the supervisor killed with SIGKILL at random
// moments and started again over the same inputs and store; a payload that
// crashes the supervisor itself; two pillbox processes sharing one store.
#include <doctest/doctest.h>
#include <signal.h>
#include <sys/eventfd.h>
#include <unistd.h>

#include <atomic>
#include <filesystem>
#include <map>
#include <nlohmann/json.hpp>
#include <random>
#include <set>
#include <thread>

#include "tests/e2e/support.h"

using e2e::run_pillbox;
using e2e::task_line;
using e2e::sql_int;
using e2e::sql_rows;

namespace {

}  // namespace

// The figure, 5000 tasks and 12 kills, in the normal build. Under
// ASan/UBSan (whose job here is memory errors on the same paths) 600 tasks,
// 6 kills after at most 80 tasks each, so that CI stays within its time
// budget (1200 tasks and 12 kills took 214 s there, the longest test).
#if defined(PILLBOX_SANITIZED)
constexpr int kTasks = 600;
constexpr int kKills = 6;
constexpr std::size_t kKillWithin = 80;
#else
constexpr int kTasks = 5000;
constexpr int kKills = 12;
constexpr std::size_t kKillWithin = 300;
#endif

TEST_CASE("5000 tasks, pillbox SIGKILLed at random moments 12 times: every task ok exactly once or quarantined") {
  e2e::TempDir dir;
  const std::string store = dir.path() + "/store";
  const std::string db = store + "/pillbox.db";
  std::string input;
  std::set<std::string> crashers;
  for (int i = 0; i < kTasks; ++i) {
    const std::string key = "t-" + std::to_string(i);
    const bool crasher = i % 250 == 7;
    if (crasher) crashers.insert(key);
    input += task_line(key, (crasher ? "S poison " : "payload ") + std::to_string(i));
  }
  const std::vector<std::string> args = {"run", "--store", store, "--handler", e2e::poison_plugin(), "--jobs", "2", "--json",
                                         "--backoff-base", "10ms", "-"};
  const unsigned seed = std::random_device{}();
  INFO("seed " << seed);
  std::mt19937 rng(seed);
  std::map<std::string, std::set<std::string>> reported;  // key -> verdicts seen on stdout, over all runs
  auto tally = [&](const e2e::RunResult& r) {
    for (const auto& rec : r.records) {
      if (rec["verdict"] != "skipped") reported[rec["key"]].insert(rec["verdict"].get<std::string>());
    }
  };

  int kills = 0;
  for (int round = 0; round < 40 && kills < kKills; ++round) {
    // Killed after a random number of tasks ran in this round. (Lines for
    // tasks skipped as done come first and fast; counting them would kill
    // pillbox mostly while it reruns, alone, a task the last kill cut short,
    // and a task cut short 3 times running alone reads as one that kills
    // pillbox — rightly, but not what this test is about.)
    const std::size_t kill_at = std::uniform_int_distribution<std::size_t>(3, kKillWithin)(rng);
    std::size_t ran = 0;
    bool sent = false;
    const auto r = run_pillbox(args, input, {}, [&](pid_t pid, std::size_t, std::string_view line) {
      if (line.find("\"verdict\":\"skipped\"") != std::string_view::npos) return;
      if (!sent && ++ran == kill_at) {
        ::kill(pid, SIGKILL);
        sent = true;
      }
    });
    tally(r);
    if (r.term_signal == SIGKILL) {
      ++kills;
    } else {
      INFO(r.describe());
      FAIL("a run ended before it could be killed at line " << kill_at);
    }
  }
  CHECK(kills >= kKills - 2);

  // The last run, undisturbed, finishes the rest.
  const auto last = run_pillbox(args, input);
  INFO(last.describe());
  tally(last);
  CHECK(last.exit_code <= 1);

  CHECK(sql_rows(db, "PRAGMA integrity_check") == std::vector<std::vector<std::string>>{{"ok"}});
  CHECK(sql_int(db, "SELECT count(*) FROM tasks") == kTasks);
  MESSAGE(kTasks << " tasks, " << kills << " SIGKILLs");
  CHECK(sql_int(db, "SELECT count(*) FROM tasks WHERE state = 'ok'") == kTasks - static_cast<long long>(crashers.size()));
  // ok exactly once: an attempt cut short by a kill has no outcome, never a second ok.
  CHECK(sql_int(db, "SELECT count(*) FROM (SELECT task_id FROM attempts WHERE kind = 'ok' GROUP BY task_id "
                    "HAVING count(*) != 1)") == 0);
  CHECK(sql_int(db, "SELECT count(*) FROM tasks t WHERE state = 'ok' AND NOT EXISTS "
                    "(SELECT 1 FROM attempts a WHERE a.task_id = t.id AND a.kind = 'ok')") == 0);
  // The poison, and only the poison, is quarantined: one record each.
  std::set<std::string> quarantined;
  for (const auto& row : sql_rows(db, "SELECT key FROM quarantine")) {
    CHECK_MESSAGE(quarantined.insert(row[0]).second, "quarantined twice: " << row[0]);
  }
  CHECK(quarantined == crashers);
  CHECK(sql_int(db, "SELECT count(*) FROM tasks WHERE state = 'quarantined'") == static_cast<long long>(crashers.size()));
  // Every task's verdict reached stdout at least once (at-least-once delivery).
  CHECK(reported.size() == kTasks);
  for (const auto& item : reported) {
    const auto& key = item.first;  // clang 14 cannot capture a structured binding
    const auto& verdicts = item.second;
    INFO(key);
    CHECK(verdicts == std::set<std::string>{crashers.count(key) ? "quarantined" : "ok"});
  }
  // Attempts cut short by the kills are on record, unfinished.
  CHECK(sql_int(db, "SELECT count(*) FROM attempts WHERE ended_at IS NULL") >= 1);
  CHECK(sql_int(db, "SELECT count(*) FROM runs") == kills + 1);
}

TEST_CASE("a payload that crashes the supervisor is quarantined after max_attempts restarts instead of looping") {
  e2e::TempDir dir;
  const std::string store = dir.path() + "/store";
  const std::string db = store + "/pillbox.db";
  std::string input;
  for (int i = 1; i <= 4; ++i) input += task_line("good-" + std::to_string(i), "fine " + std::to_string(i));
  input += task_line("killer", "this kills the supervisor");
  const std::map<std::string, std::string> env = {{"PILLBOX_TEST_CRASH_SUPERVISOR_ON", "kills the supervisor"}};
  const std::vector<std::string> args = {"run", "--store", store, "--handler", e2e::poison_plugin(), "--jobs", "1", "--json", "-"};
  for (int restart = 1; restart <= 3; ++restart) {
    const auto r = run_pillbox(args, input, env);
    INFO("run " << restart << ": " << r.describe());
    CHECK(r.term_signal == SIGABRT);
    CHECK(sql_int(db, "SELECT attempts FROM tasks WHERE key = 'killer'") == restart);
  }
  // After the first loss it ran alone each time: the evidence is its own.
  CHECK(sql_int(db, "SELECT count(*) FROM attempts a JOIN tasks t ON a.task_id = t.id "
                    "WHERE t.key = 'killer' AND a.solo = 1") == 2);
  const auto r = run_pillbox(args, input, env);
  INFO(r.describe());
  CHECK(r.term_signal == 0);
  CHECK(r.exit_code == 1);
  const auto& killer = r.record("killer");
  CHECK(killer["verdict"] == "quarantined");
  CHECK(killer["kind"] == "supervisor-lost");
  CHECK(killer["attempts"] == 3);
  CHECK(sql_rows(db, "SELECT kind, status FROM quarantine WHERE key = 'killer'") ==
        std::vector<std::vector<std::string>>{{"supervisor-lost", "quarantined"}});
  CHECK(sql_int(db, "SELECT count(*) FROM attempts a JOIN tasks t ON a.task_id = t.id "
                    "WHERE t.key = 'killer' AND a.ended_at IS NULL") == 3);
  CHECK(sql_int(db, "SELECT count(*) FROM tasks WHERE state = 'ok'") == 4);

  const auto after = run_pillbox(args, input, env);  // nothing left: no more crashes
  INFO(after.describe());
  CHECK(after.term_signal == 0);
  CHECK(after.exit_code == 0);
  REQUIRE(after.records.size() == 5);
  for (const auto& rec : after.records) CHECK(rec["verdict"] == "skipped");
}

TEST_CASE("with other tasks in flight when pillbox dies, only the payload that kills it is quarantined") {
  e2e::TempDir dir;
  const std::string store = dir.path() + "/store";
  const std::string db = store + "/pillbox.db";
  std::string input;
  for (int i = 1; i <= 40; ++i) {
    input += task_line("good-" + std::to_string(i), "fine " + std::to_string(i));
    if (i == 3) input += task_line("killer", "this kills the supervisor");
  }
  const std::map<std::string, std::string> env = {{"PILLBOX_TEST_CRASH_SUPERVISOR_ON", "kills the supervisor"}};
  const std::vector<std::string> args = {"run", "--store", store, "--handler", e2e::poison_plugin(), "--jobs", "2", "--json", "-"};
  int crashes = 0;
  e2e::RunResult last;
  for (int run = 0; run < 8; ++run) {
    last = run_pillbox(args, input, env);
    if (last.term_signal != SIGABRT) break;
    ++crashes;
  }
  INFO(last.describe());
  CHECK(crashes == 3);
  CHECK(last.exit_code == 1);
  CHECK(sql_rows(db, "SELECT key, kind FROM quarantine") ==
        std::vector<std::vector<std::string>>{{"killer", "supervisor-lost"}});
  CHECK(sql_int(db, "SELECT count(*) FROM tasks WHERE state = 'ok'") == 40);
}

TEST_CASE("SIGTERM and SIGINT stop a run cleanly: attempts in flight are interrupted, never held against the payload") {
  e2e::TempDir dir;
  const std::string store = dir.path() + "/store";
  const std::string db = store + "/pillbox.db";
  // "fast" answers at once; the others take 30 s: in flight when the signal
  // comes. The signal goes once a slow task said it started (a file in
  // `started`) and pillbox printed its first line (then its pid is known):
  // in the runs after the first, "fast" is skipped as done and its line
  // comes before any slow task has started.
  e2e::TempDir started(01777, e2e::host_dir_tasks_see());
  std::string input = task_line("fast", "fast");
  for (int i = 1; i <= 3; ++i) input += task_line("slow-" + std::to_string(i), "slow " + std::to_string(i));
  const std::vector<std::string> args = {"run", "--store", store, "--jobs", "2", "--json", "--writable", started.path(),
                                         "-", "--", "/bin/sh", "-c",
                                         "p=$(cat); case $p in fast) echo fast;; *) touch " + started.path() +
                                             "/slow.$$; sleep 30;; esac"};
  for (int sig : {SIGTERM, SIGINT, SIGTERM, SIGINT}) {
    std::filesystem::remove_all(started.path());
    std::filesystem::create_directory(started.path());
    std::filesystem::permissions(started.path(), std::filesystem::perms(01777));
    std::atomic<pid_t> pillbox{0};
    std::atomic<bool> sent{false};
    auto send_once = [&] {
      const pid_t pid = pillbox.load();
      if (pid > 0 && e2e::has_file_starting(started.path(), "slow.") && !sent.exchange(true)) ::kill(pid, sig);
    };
    const int stop = ::eventfd(0, EFD_CLOEXEC);
    REQUIRE(stop >= 0);
    std::thread watcher([&] { e2e::wait_in_dir(started.path(), [&] { send_once(); return sent.load(); }, stop); });
    const auto r = run_pillbox(args, input, {}, [&](pid_t pid, std::size_t line_no, std::string_view) {
      if (line_no == 1) pillbox = pid;
      send_once();
    });
    const std::uint64_t one = 1;
    (void)!::write(stop, &one, sizeof one);
    watcher.join();
    ::close(stop);
    CHECK(sent.load());
    INFO(r.describe());
    CHECK(r.term_signal == 0);
    CHECK(r.exit_code == 128 + sig);
    CHECK(r.err.find(sig == SIGINT ? "stopped by SIGINT" : "stopped by SIGTERM") != std::string::npos);
    CHECK(r.seconds < 20);
  }
  CHECK(sql_int(db, "SELECT count(*) FROM attempts WHERE ended_at IS NULL") == 0);
  CHECK(sql_int(db, "SELECT count(*) FROM attempts WHERE kind = 'interrupted' AND charged = 0") >= 4);
  CHECK(sql_int(db, "SELECT count(*) FROM quarantine") == 0);
  CHECK(sql_int(db, "SELECT count(*) FROM tasks WHERE state = 'ok'") == 1);  // fast
  CHECK(sql_int(db, "SELECT count(*) FROM tasks WHERE state = 'pending'") ==
        sql_int(db, "SELECT count(*) FROM tasks") - 1);
}

TEST_CASE("two pillbox processes sharing one store at once: no corruption, no lost record") {
  e2e::TempDir dir;
  const std::string store = dir.path() + "/store";
  const std::string db = store + "/pillbox.db";
  std::string a_input, b_input;
  for (int i = 0; i < 400; ++i) {
    a_input += task_line("a-" + std::to_string(i), (i % 40 == 3 ? "S a " : "a ") + std::to_string(i));
    b_input += task_line("b-" + std::to_string(i), (i % 40 == 5 ? "S b " : "b ") + std::to_string(i));
  }
  for (int i = 0; i < 50; ++i) {  // the same tasks in both inputs, 5 of them poison
    const std::string payload = (i % 10 == 4 ? "S shared " : "shared ") + std::to_string(i);
    a_input += task_line("shared-" + std::to_string(i), payload);
    b_input += task_line("shared-" + std::to_string(i), payload);
  }
  const std::vector<std::string> args = {"run", "--store", store, "--handler", e2e::poison_plugin(), "--jobs", "2", "--json",
                                         "--backoff-base", "10ms", "-"};
  e2e::RunResult a, b;
  std::thread other([&] { b = run_pillbox(args, b_input); });
  a = run_pillbox(args, a_input);
  other.join();
  for (const auto* r : {&a, &b}) {
    INFO(r->describe());
    CHECK(r->exit_code == 1);  // the crashers
    CHECK(r->err.find("locked") == std::string::npos);
    CHECK(r->err.find("busy") == std::string::npos);
  }
  CHECK(sql_rows(db, "PRAGMA integrity_check") == std::vector<std::vector<std::string>>{{"ok"}});
  CHECK(sql_int(db, "SELECT count(*) FROM tasks") == 850);
  CHECK(sql_int(db, "SELECT count(*) FROM tasks WHERE state = 'ok'") == 825);
  // One record per poison task, even for those both processes ran.
  CHECK(sql_int(db, "SELECT count(*) FROM quarantine") == 25);
  CHECK(sql_int(db, "SELECT count(DISTINCT task_id) FROM quarantine") == 25);
  CHECK(sql_int(db, "SELECT count(*) FROM runs") == 2);
  // Attempt numbers come from the database: a task both ran has attempts 1
  // and 2, never two attempts numbered 1 (the primary key would refuse it).
  CHECK(sql_int(db, "SELECT max(attempts) FROM tasks WHERE key LIKE 'shared-%' AND state = 'ok'") <= 2);
  CHECK(sql_int(db, "SELECT max(attempts) FROM tasks WHERE key LIKE 'shared-%'") <= 4);  // poison: 2 each
  CHECK(sql_int(db, "SELECT count(*) FROM tasks t WHERE t.attempts != (SELECT count(*) FROM attempts a "
                    "WHERE a.task_id = t.id)") == 0);
}
