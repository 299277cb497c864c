// A view of every task (issue 14, point 8): `pillbox tasks` shows each task
// of the store with its state (pending, retrying, held, gave-up, ok,
// quarantined), attempts, last kind and fingerprint, next retry and record;
// `quarantine stats` counts records by status; `list` and `stats` filter by
// --handler.
#include <doctest/doctest.h>
#include <signal.h>
#include <sys/stat.h>

#include <chrono>
#include <filesystem>
#include <map>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "tests/e2e/background.h"
#include "tests/e2e/support.h"

using e2e::run_pillbox;
using e2e::sql_int;

namespace {

// What each payload does: ok echoes, crash dies of SIGSEGV, transient exits
// 75 (--retry-exit-code: not the payload's fault), flaky exits 3, block marks
// itself started and waits for GO.
std::vector<std::string> behaviours(const e2e::TempDir& work) {
  const std::string w = work.path();
  return {"--", "/bin/sh", "-c",
          "p=$(cat); case \"$p\" in crash*) kill -SEGV $$;; transient*) exit 75;; flaky*) exit 3;; block*) touch \"" + w +
              "/started.block\"; while [ ! -e \"" + w + "/GO\" ]; do sleep 0.02; done;; esac; printf '%s' \"$p\""};
}

std::vector<std::string> with(std::vector<std::string> args, const std::vector<std::string>& more) {
  args.insert(args.end(), more.begin(), more.end());
  return args;
}

// `pillbox tasks --json` records by the last part of their key (the file name).
std::map<std::string, nlohmann::json> tasks_by_name(const e2e::RunResult& r) {
  std::map<std::string, nlohmann::json> out;
  for (const auto& rec : r.records) {
    const std::string key = rec["key"];
    out[key.substr(key.rfind('/') + 1)] = rec;
  }
  return out;
}

std::string shared_counter(const e2e::TempDir& work) {
  const std::string path = work.write("runs", "");
  REQUIRE(::chmod(path.c_str(), 0666) == 0);
  return path;
}

}  // namespace

TEST_CASE("pillbox tasks: ok, quarantined, gave-up, retrying and pending tasks, with their attempts and next retry") {
  e2e::TempDir dir;
  e2e::TempDir work(0777);
  e2e::TempDir first_inputs;
  e2e::TempDir second_inputs;
  const std::string store = dir.path() + "/store";
  const std::string db = store + "/pillbox.db";
  first_inputs.write("good", "ok");
  first_inputs.write("poison", "crash");
  first_inputs.write("unlucky", "transient");
  second_inputs.write("flaky", "flaky");
  second_inputs.write("stuck", "block");

  // Run 1: retries at once; the crash is quarantined on its second attempt,
  // the transient failure gives up after two.
  const auto first = run_pillbox(with({"run", "--store", store, "--json", "--max-attempts", "2", "--backoff-base", "1ms",
                                       "--backoff-max", "1ms", "--retry-exit-code", "75", "--writable", work.path(),
                                       first_inputs.path()},
                                      behaviours(work)));
  INFO(first.describe());
  REQUIRE(first.exit_code == 1);
  // Run 2: a retry an hour away (full jitter: almost surely not in this
  // test), and a task that runs until the run is stopped.
  e2e::Background second(e2e::pillbox_binary(),
                         with({"run", "--store", store, "--json", "--jobs", "2", "--max-attempts", "3", "--backoff-base",
                               "1h", "--backoff-max", "1h", "--writable", work.path(), second_inputs.path()},
                              behaviours(work)));
  const bool waiting = e2e::eventually([&] {
    return e2e::has_file_starting(work.path(), "started.block") &&
           sql_int(db, "SELECT count(*) FROM tasks WHERE next_retry_at IS NOT NULL") == 1;
  });
  REQUIRE_MESSAGE(waiting, second.err());
  const auto live = tasks_by_name(run_pillbox({"tasks", "--store", store, "--json"}));
  REQUIRE(live.count("flaky") == 1);
  REQUIRE(live.count("stuck") == 1);
  CHECK(live.at("flaky")["state"] == "retrying");
  CHECK(live.at("stuck")["state"] == "pending");
  CHECK(live.at("stuck")["last_kind"] == "unfinished");
  CHECK(!live.at("stuck")["claimed_by"].is_null());  // running, in that run
  second.signal(SIGTERM);
  CHECK(second.wait() == 128 + SIGTERM);

  const auto view = run_pillbox({"tasks", "--store", store, "--json"});
  INFO(view.describe());
  CHECK(view.exit_code == 0);
  const auto tasks = tasks_by_name(view);
  REQUIRE(tasks.size() == 5);
  CHECK(tasks.at("good")["state"] == "ok");
  CHECK(tasks.at("good")["attempts"] == 1);
  CHECK(tasks.at("good")["last_kind"] == "ok");
  CHECK(tasks.at("good")["quarantine_id"].is_null());

  const auto& poison = tasks.at("poison");
  CHECK(poison["state"] == "quarantined");
  CHECK(poison["attempts"] == 2);
  CHECK(poison["last_kind"] == "crash");
  CHECK(poison["quarantine_id"] == sql_int(db, "SELECT id FROM quarantine"));
  CHECK(poison["last_fingerprint"] == e2e::sql_rows(db, "SELECT fingerprint FROM quarantine")[0][0]);

  CHECK(tasks.at("unlucky")["state"] == "gave-up");
  CHECK(tasks.at("unlucky")["attempts"] == 2);

  const auto& flaky = tasks.at("flaky");
  CHECK(flaky["state"] == "retrying");
  CHECK(flaky["attempts"] == 1);
  CHECK(!flaky["last_kind"].is_null());
  CHECK(!flaky["last_fingerprint"].is_null());
  CHECK(!flaky["next_retry_at"].is_null());
  CHECK(flaky["next_retry_in_ms"].get<long long>() <= 3600 * 1000);
  CHECK(flaky["claimed_by"].is_null());  // the run ended: its claims are released

  CHECK(tasks.at("stuck")["state"] == "pending");
  CHECK(tasks.at("stuck")["last_kind"] == "interrupted");
  CHECK(tasks.at("stuck")["claimed_by"].is_null());
  CHECK(view.err.find("5 tasks: 1 pending, 1 retrying, 1 gave-up, 1 ok, 1 quarantined") != std::string::npos);

  // The table: one line per task, the retry's time relative, the record's id.
  const auto table = run_pillbox({"tasks", "--store", store});
  INFO(table.describe());
  CHECK(table.exit_code == 0);
  for (const auto& line : {std::string("flaky"), std::string("poison")}) {
    const auto at = table.out.find(line);
    REQUIRE(at != std::string::npos);
    const std::string row = table.out.substr(at, table.out.find('\n', at) - at);
    if (line == "flaky") CHECK(row.find(" in ") != std::string::npos);
    if (line == "poison") CHECK(row.find(" " + std::to_string(sql_int(db, "SELECT id FROM quarantine"))) != std::string::npos);
  }

  // Filters.
  CHECK(run_pillbox({"tasks", "--store", store, "--json", "--state", "retrying"}).records.size() == 1);
  CHECK(run_pillbox({"tasks", "--store", store, "--json", "--state", "gave-up"}).records.size() == 1);
  CHECK(run_pillbox({"tasks", "--store", store, "--json", "--key", std::string(poison["key"])}).records.size() == 1);
  CHECK(run_pillbox({"tasks", "--store", store, "--json", "--handler", "exec"}).records.size() == 5);
  CHECK(run_pillbox({"tasks", "--store", store, "--json", "--handler", "echo"}).records.empty());
  CHECK(run_pillbox({"tasks", "--store", store, "--json", "--limit", "2"}).records.size() == 2);
  const auto bad = run_pillbox({"tasks", "--store", store, "--state", "lost"});
  CHECK(bad.exit_code == 2);
  CHECK(bad.err.find("unknown state 'lost'") != std::string::npos);
  CHECK(run_pillbox({"tasks", "--store", dir.path() + "/none"}).exit_code != 0);
}

TEST_CASE("pillbox tasks: tasks a run stopped by an outage (exit 4) left held are shown held") {
  e2e::TempDir dir;
  e2e::TempDir work(01777);
  const std::string counter = shared_counter(work);
  const std::string store = dir.path() + "/store";
  std::string input;
  for (int i = 1; i <= 100; ++i) {
    input += nlohmann::json{{"key", "doc-" + std::to_string(i)}, {"payload", "document " + std::to_string(i)}}.dump() + "\n";
  }
  // Never healthy: the outage lasts longer than the 100 inputs.
  const auto run = run_pillbox({"run", "--store", store, "--jobs", "2", "--json", "--writable", work.path(),
                                "--breaker-probe-interval", "20ms", "-", "--", e2e::fixture("poison_corpus"),
                                work.path(), counter, work.write("limit", "1000")},
                               input);
  INFO(run.describe());
  REQUIRE(run.exit_code == 4);
  const auto held = run_pillbox({"tasks", "--store", store, "--json", "--state", "held"});
  INFO(held.describe());
  CHECK(held.records.size() == 100);
  for (const auto& t : held.records) {
    CHECK(t["state"] == "held");
    CHECK(t["attempts"].get<int>() >= 1);
    CHECK(t["next_retry_at"].is_null());
  }
  CHECK(run_pillbox({"tasks", "--store", store, "--json", "--state", "quarantined"}).records.empty());
  // They can be forgotten (issue 26, point 4): only with a state that no
  // run finished, and then with their attempts.
  e2e::check_usage_error({"tasks", "--store", store, "--forget"}, "--forget needs --state held, pending, retrying or gave-up");
  e2e::check_usage_error({"tasks", "--store", store, "--forget", "--state", "ok"}, "ok tasks and quarantined ones are kept");
  const auto one = run_pillbox({"tasks", "--store", store, "--forget", "--state", "held", "--key", "doc-7"});
  INFO(one.describe());
  CHECK(one.exit_code == 0);
  CHECK(one.err.find("forgot 1 held task") != std::string::npos);
  CHECK(sql_int(store + "/pillbox.db", "SELECT count(*) FROM tasks WHERE key = 'doc-7'") == 0);
  const auto rest = run_pillbox({"tasks", "--store", store, "--forget", "--state", "held"});
  INFO(rest.describe());
  CHECK(rest.exit_code == 0);
  CHECK(rest.err.find("forgot 99 held tasks") != std::string::npos);
  CHECK(sql_int(store + "/pillbox.db", "SELECT count(*) FROM tasks") == 0);
  CHECK(sql_int(store + "/pillbox.db", "SELECT count(*) FROM attempts") == 0);
}

TEST_CASE("quarantine stats counts records by status; list and stats filter by --handler") {
  e2e::TempDir dir;
  e2e::TempDir work(0777);
  e2e::TempDir inputs;
  const std::string store = dir.path() + "/store";
  for (const char* name : {"c1", "c2", "c3"}) inputs.write(name, std::string("crash ") + name);
  const auto run = run_pillbox(with({"run", "--store", store, "--json", "--max-attempts", "1", "--writable", work.path(),
                                     inputs.path()},
                                    behaviours(work)));
  INFO(run.describe());
  REQUIRE(run.exit_code == 1);
  REQUIRE(sql_int(store + "/pillbox.db", "SELECT count(*) FROM quarantine") == 3);
  const auto discarded = run_pillbox({"quarantine", "discard", "1", "--reason", "a test", "--store", store});
  REQUIRE(discarded.exit_code == 0);

  const auto stats = run_pillbox({"quarantine", "stats", "--store", store, "--json"});
  INFO(stats.describe());
  REQUIRE(stats.records.size() == 1);  // one bug: one group
  const auto& by_status = stats.records[0]["by_status"];
  CHECK(by_status["quarantined"] == 2);
  CHECK(by_status["discarded"] == 1);
  CHECK(by_status["resolved"] == 0);
  CHECK(by_status["replaying"] == 0);
  CHECK(by_status["failed-again"] == 0);
  const auto text = run_pillbox({"quarantine", "stats", "--store", store});
  CHECK(text.err.find("3 records in 1 group: 2 quarantined, 0 allowed, 0 replaying, 0 resolved, 0 failed-again, 1 discarded") !=
        std::string::npos);

  CHECK(run_pillbox({"quarantine", "list", "--store", store, "--json", "--handler", "exec"}).records.size() == 3);
  CHECK(run_pillbox({"quarantine", "list", "--store", store, "--json", "--handler", "echo"}).records.empty());
  CHECK(run_pillbox({"quarantine", "stats", "--store", store, "--json", "--handler", "echo"}).records.empty());
  const auto by_handler = run_pillbox({"quarantine", "stats", "--store", store, "--handler", "exec"});
  CHECK(by_handler.err.find("3 records in 1 group") != std::string::npos);
  // Hostile filter text is a value, not SQL.
  CHECK(run_pillbox({"quarantine", "list", "--store", store, "--json", "--handler", "exec' OR '1'='1"}).records.empty());
}
