// The ledger counts a turn's attempts in one transaction that commits while
// the turn's children fork (supervisor/flow/task_flow.h, commit_turn): no
// child gets its payload before the commit. These runs make that commit fail
// for real and check, on real processes, that no program of the turn ever
// read a payload, that nothing of the turn is in the store, and that the run
// says why.
#include <doctest/doctest.h>

#include <filesystem>
#include <string>

#include "tests/e2e/support.h"

using e2e::run_pillbox;
using e2e::sql_int;
using e2e::task_line;

namespace {

// Every statement of a transaction that inserts an attempt succeeds, and
// its COMMIT fails: SQLite checks a deferred foreign key only then.
void fail_commits_that_start_attempts(const std::string& db) {
  e2e::sql_write(db, "CREATE TABLE trap (task_id INTEGER REFERENCES tasks(id) DEFERRABLE INITIALLY DEFERRED)");
  e2e::sql_write(db, "CREATE TRIGGER trap_attempts AFTER INSERT ON attempts BEGIN INSERT INTO trap VALUES (-1); END");
}

}  // namespace

TEST_CASE("a turn whose ledger commit fails runs none of its tasks: no program reads a payload, the run says why") {
  e2e::TempDir dir;
  e2e::TempDir work(01777);  // poison_corpus appends one byte per run to its counter here
  const std::string store = dir.path() + "/store";
  const std::string db = store + "/pillbox.db";
  const auto first = run_pillbox({"run", "--store", store, "-", "--", e2e::fixture("poison_corpus"), work.path()},
                                 task_line("first", "hello"));
  REQUIRE_MESSAGE(first.exit_code == 0, first.describe());
  fail_commits_that_start_attempts(db);

  const std::string counter = work.path() + "/runs";
  const std::string limit = work.write("limit", "0");  // no run fails on the counter's account
  std::string input;
  for (int i = 1; i <= 6; ++i) input += task_line("good-" + std::to_string(i), "good payload " + std::to_string(i));
  const std::vector<std::string> args = {"run",      "--store", store, "--jobs", "2", "--json", "-", "--writable",
                                         work.path(), "--", e2e::fixture("poison_corpus"), work.path(), counter, limit};
  const auto failed = run_pillbox(args, input);
  INFO(failed.describe());
  CHECK(failed.exit_code != 0);
  CHECK(failed.exit_code != 1);  // not "some tasks failed": the run itself did
  CHECK(failed.err.find("FOREIGN KEY constraint failed") != std::string::npos);
  CHECK(failed.records.empty());  // no verdict for a task that never ran
  CHECK_FALSE(std::filesystem::exists(counter));  // no program got a payload
  CHECK(sql_int(db, "SELECT count(*) FROM attempts") == 1);  // the first run's only
  CHECK(sql_int(db, "SELECT count(*) FROM tasks WHERE claim IS NOT NULL") == 0);

  // The same run once the commit can succeed: every task runs once.
  e2e::sql_write(db, "DROP TRIGGER trap_attempts");
  const auto again = run_pillbox(args, input);
  INFO(again.describe());
  CHECK(again.exit_code == 0);
  CHECK(again.count_kind("ok") == 6);
  CHECK(std::filesystem::file_size(counter) == 6);
  CHECK(sql_int(db, "SELECT count(*) FROM attempts") == 7);
}
