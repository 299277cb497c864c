// pillbox reproduce (issue 4): a quarantined payload run again N times in the
// sandbox under its recorded handler and policy; reliable when at least half
// of the runs end with its fingerprint, flaky when fewer do but some run
// fails, not reproduced when every run is ok; the verdict is kept.
#include <doctest/doctest.h>

#include <nlohmann/json.hpp>

#include "shared/base64.h"
#include "tests/e2e/support.h"

using e2e::run_pillbox;
using e2e::task_line;
using e2e::sql_int;
using e2e::sql_rows;

namespace {

}  // namespace

TEST_CASE("reproduce: a deterministic crasher is reliable, and the verdict is kept in the record") {
  e2e::TempDir dir;
  const std::string store = dir.path() + "/store";
  const std::string db = store + "/pillbox.db";
  const auto run = run_pillbox({"run", "--store", store, "--handler", "plugin:" + e2e::fixture("poison_plugin.so"),
                                "--json", "--backoff-base", "5ms", "-"},
                               task_line("crasher", "S always"));
  INFO(run.describe());
  REQUIRE(sql_int(db, "SELECT count(*) FROM quarantine") == 1);

  // A plugin record runs only when the operator names its plugin again (issue 25).
  const auto unnamed = run_pillbox({"reproduce", "1", "--runs", "1", "--store", store});
  CHECK(unnamed.exit_code == 2);
  CHECK(unnamed.err.find("is a plugin: code pillbox loads into its own processes, which a record never chooses; say "
                         "--handler plugin:") != std::string::npos);
  const auto other = run_pillbox({"reproduce", "1", "--runs", "1", "--store", store, "--handler", "echo"});
  CHECK(other.exit_code == 2);
  CHECK(other.err.find("--handler echo is not the record's handler") != std::string::npos);
  const auto r = run_pillbox({"reproduce", "1", "--runs", "6", "--jobs", "2", "--json", "--store", store, "--handler",
                              "plugin:" + e2e::fixture("poison_plugin.so")});
  INFO(r.describe());
  CHECK(r.exit_code == 0);
  REQUIRE(r.records.size() == 1);
  CHECK(r.records[0]["verdict"] == "reliable");
  CHECK(r.records[0]["runs"] == 6);
  CHECK(r.records[0]["matches"] == 6);
  CHECK(sql_rows(db, "SELECT reproduce_outcome, reproduce_runs, reproduce_matches FROM quarantine") ==
        std::vector<std::vector<std::string>>{{"reliable", "6", "6"}});
  CHECK(sql_int(db, "SELECT count(*) FROM audit WHERE action = 'reproduced' AND detail LIKE 'reliable: 6 of 6 runs%'") == 1);
  const auto shown = run_pillbox({"quarantine", "show", "1", "--store", store});
  CHECK(shown.out.find("reliable: 6 of 6 runs ended with this fingerprint") != std::string::npos);
  // The record's status does not change: reproducing is looking, not fixing.
  CHECK(sql_rows(db, "SELECT status FROM quarantine") == std::vector<std::vector<std::string>>{{"quarantined"}});
}

TEST_CASE("reproduce: a payload that crashes one time in three is flaky") {
  e2e::TempDir dir;
  e2e::TempDir work(01777);  // the fixture's run counter, written by the sandbox user
  const std::string store = dir.path() + "/store";
  const std::string db = store + "/pillbox.db";
  // One attempt: the first run of this payload crashes (runs 1, 4, 7, ...
  // crash), and is quarantined at once.
  const auto run = run_pillbox({"run", "--store", store, "--max-attempts", "1", "--json", "-", "--writable", work.path(), "--",
                                e2e::fixture("poison_corpus"), work.path()},
                               task_line("sometimes", "P one in three"));
  INFO(run.describe());
  REQUIRE(sql_int(db, "SELECT count(*) FROM quarantine") == 1);
  // Runs 2..10: 4, 7 and 10 crash.
  // The record binds a host path writable: said again (issue 25).
  const auto r = run_pillbox({"reproduce", "1", "--runs", "9", "--jobs", "2", "--json", "--store", store, "--writable",
                              work.path()});
  INFO(r.describe());
  CHECK(r.exit_code == 0);
  REQUIRE(r.records.size() == 1);
  CHECK(r.records[0]["verdict"] == "flaky");
  CHECK(r.records[0]["matches"] == 3);
  CHECK(r.records[0]["runs"] == 9);
  REQUIRE(r.records[0]["other_outcomes"].size() == 1);
  CHECK(r.records[0]["other_outcomes"][0]["outcome"] == "ok");
  CHECK(r.records[0]["other_outcomes"][0]["count"] == 6);
  CHECK(sql_rows(db, "SELECT reproduce_outcome, reproduce_matches FROM quarantine") ==
        std::vector<std::vector<std::string>>{{"flaky", "3"}});
}

TEST_CASE("reproduce: a payload that no longer fails is not reproduced (0 of N), not flaky") {
  e2e::TempDir dir;
  e2e::TempDir work(01777);  // the fixture's marker, written by the sandbox user
  const std::string store = dir.path() + "/store";
  const std::string db = store + "/pillbox.db";
  // 'F': crashes the first time the fixture sees it, ok ever after.
  const auto run = run_pillbox({"run", "--store", store, "--max-attempts", "1", "--json", "-", "--writable", work.path(), "--",
                                e2e::fixture("poison_corpus"), work.path()},
                               task_line("once", "F crashes once"));
  INFO(run.describe());
  REQUIRE(sql_int(db, "SELECT count(*) FROM quarantine") == 1);
  const auto r = run_pillbox({"reproduce", "1", "--runs", "3", "--store", store, "--writable", work.path()});
  INFO(r.describe());
  CHECK(r.exit_code == 1);
  CHECK(r.out.find("record 1: not reproduced (0 of 3): every run ended ok") == 0);
  CHECK(r.out.find("flaky") == std::string::npos);
  CHECK(sql_rows(db, "SELECT reproduce_outcome, reproduce_runs, reproduce_matches FROM quarantine") ==
        std::vector<std::vector<std::string>>{{"not-reproduced", "3", "0"}});
  const auto shown = run_pillbox({"quarantine", "show", "1", "--store", store});
  CHECK(shown.out.find("not reproduced (0 of 3): every run ended ok") != std::string::npos);
  const auto json = run_pillbox({"reproduce", "1", "--runs", "2", "--json", "--store", store, "--writable", work.path()});
  REQUIRE(json.records.size() == 1);
  CHECK(json.records[0]["verdict"] == "not-reproduced");
}

TEST_CASE("reproduce: bad input is a clear error and records nothing") {
  e2e::TempDir dir;
  const std::string store = dir.path() + "/store";
  const std::string db = store + "/pillbox.db";
  REQUIRE(run_pillbox({"run", "--store", store, "--handler", "plugin:" + e2e::fixture("poison_plugin.so"), "-"},
                      task_line("crasher", "S always"))
              .exit_code == 1);
  const struct {
    std::vector<std::string> args;
    int exit_code;
    const char* says;
  } cases[] = {
      {{"reproduce", "7"}, 2, "no quarantine record 7"},
      {{"reproduce", "x1"}, 2, "'x1' is not a record id"},
      {{"reproduce", "1", "--runs", "0"}, 2, "--runs expects a whole number from 1"},
      {{"reproduce"}, 2, "give exactly one record ID"},
  };
  for (const auto& c : cases) {
    auto args = c.args;
    args.insert(args.end(), {"--store", store});
    const auto r = run_pillbox(args);
    INFO(r.describe());
    CHECK(r.exit_code == c.exit_code);
    CHECK(r.err.find(c.says) != std::string::npos);
  }
  CHECK(sql_int(db, "SELECT count(*) FROM audit WHERE action = 'reproduced'") == 0);
  CHECK(sql_int(db, "SELECT reproduce_runs FROM quarantine") == 0);
}
