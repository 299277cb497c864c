// Killing pillbox is not the payload's fault (issue 11, point 16): a task
// whose attempts keep ending because pillbox is SIGKILLed from outside while
// it runs alone is never quarantined as supervisor-lost; after 2 x
// max-attempts such losses it gives up (for this run only), and the next run
// finishes it. A payload that really crashes the supervisor still ends as
// supervisor-lost (tests/e2e/crash_safety_test.cpp): its crash leaves a note.
#include <signal.h>
#include <sys/eventfd.h>
#include <unistd.h>

#include <doctest/doctest.h>
#include <filesystem>
#include <string>
#include <thread>

#include "tests/e2e/support.h"

using e2e::run_pillbox;
using e2e::sql_int;

namespace {

}  // namespace

TEST_CASE("a good payload running alone while pillbox is killed from outside, again and again, is never quarantined") {
  e2e::TempDir dir;
  e2e::TempDir work(0777);  // the task (running as a slot's uid) marks itself here
  const std::string store = dir.path() + "/store";
  const std::string db = store + "/pillbox.db";
  const std::string input = dir.write("good", "a good payload\n");
  // Until GO exists, the task marks that it runs and waits to be killed with pillbox.
  const std::string script = "if [ -e " + work.path() + "/GO ]; then cat; else touch " + work.path() +
                             "/running.$$; exec sleep 60; fi";
  const std::vector<std::string> args = {"run", "--json", "--store", store, "--jobs", "1", "--writable", work.path(),
                                         input, "--", "/bin/sh", "-c", script};
  int kills = 0;
  e2e::RunResult last;
  for (int run = 0; run < 12; ++run) {
    for (const auto& e : std::filesystem::directory_iterator(work.path())) std::filesystem::remove(e.path());
    const int stop = ::eventfd(0, EFD_CLOEXEC);
    REQUIRE(stop >= 0);
    bool killed = false;
    std::thread watcher([&] {
      if (!e2e::wait_for_file(work.path(), "running.", stop)) return;
      if (const pid_t pid = e2e::pillbox_naming(store); pid > 0) killed = ::kill(pid, SIGKILL) == 0;
    });
    last = run_pillbox(args);
    const std::uint64_t one = 1;
    (void)!::write(stop, &one, sizeof one);
    watcher.join();
    ::close(stop);
    if (!killed) break;  // the run ended without the task running
    INFO(last.describe());
    REQUIRE(last.term_signal == SIGKILL);
    ++kills;
  }
  INFO(last.describe());
  // The first attempt ran among others' (none here, but not marked alone),
  // then 6 ran alone: 2 x max-attempts losses without evidence, then it gave up.
  CHECK(kills == 7);
  CHECK(last.exit_code == 1);
  REQUIRE(last.records.size() == 1);
  CHECK(last.records[0]["verdict"] == "gave-up");
  CHECK(last.records[0]["kind"] == "supervisor-lost");
  CHECK(std::string(last.records[0]["verdict_reason"]).find("not quarantined") != std::string::npos);
  CHECK(sql_int(db, "SELECT count(*) FROM quarantine") == 0);
  CHECK(sql_int(db, "SELECT count(*) FROM runs WHERE died_of IS NOT NULL") == 0);  // SIGKILL leaves no note

  // The next run, with the payload now able to finish: a fresh budget, ok.
  work.write("GO", "");
  const auto done = run_pillbox(args);
  INFO(done.describe());
  CHECK(done.exit_code == 0);
  REQUIRE(done.records.size() == 1);
  CHECK(done.records[0]["verdict"] == "ok");
  CHECK(done.records[0]["output"] == "a good payload\n");
  CHECK(sql_int(db, "SELECT count(*) FROM quarantine") == 0);
}

TEST_CASE("a supervisor crash leaves a note that the next run records as evidence") {
  e2e::TempDir dir;
  const std::string store = dir.path() + "/store";
  const std::string db = store + "/pillbox.db";
  const std::string input = e2e::task_line("killer", "this kills the supervisor");
  const std::vector<std::string> args = {"run", "--store", store, "--handler", e2e::poison_plugin(), "--json", "-"};
  const std::map<std::string, std::string> env = {{"PILLBOX_TEST_CRASH_SUPERVISOR_ON", "kills the supervisor"}};
  const auto crashed = run_pillbox(args, input, env);
  CHECK(crashed.term_signal == SIGABRT);
  CHECK(std::filesystem::exists(store + "/deaths/run-1"));
  CHECK(e2e::read_file(store + "/deaths/run-1") == "SIGABRT\n");
  const auto next = run_pillbox(args, input, env);  // crashes again, after recording the note
  CHECK(next.term_signal == SIGABRT);
  CHECK(e2e::sql_rows(db, "SELECT id, coalesce(died_of, '') FROM runs ORDER BY id") ==
        std::vector<std::vector<std::string>>{{"1", "SIGABRT"}, {"2", ""}});
  CHECK_FALSE(std::filesystem::exists(store + "/deaths/run-1"));
  CHECK(std::filesystem::exists(store + "/deaths/run-2"));
}
