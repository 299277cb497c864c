// Poison or outage (issue 3): a handler that fails every input the same way
// for a while — a missing dependency — must not fill the quarantine with good
// payloads. The breaker opens, the run says so, intake pauses, probes find
// the end of the outage, and the inputs that failed during it succeed after.
#include <doctest/doctest.h>
#include <sys/stat.h>

#include <map>
#include <nlohmann/json.hpp>

#include "tests/e2e/support.h"

using e2e::run_pillbox;
using e2e::sql_int;

namespace {

// The fixture's run counter: every task's uid appends to it.
std::string shared_counter(const e2e::TempDir& work) {
  const std::string path = work.write("runs", "");
  REQUIRE(::chmod(path.c_str(), 0666) == 0);
  return path;
}

std::string corpus(int n) {
  std::string input;
  for (int i = 1; i <= n; ++i) {
    input += nlohmann::json{{"key", "doc-" + std::to_string(i)}, {"payload", "document " + std::to_string(i)}}.dump() + "\n";
  }
  return input;
}

}  // namespace

TEST_CASE("an outage over 200 distinct inputs opens the breaker, quarantines nothing for good, then all succeed") {
  e2e::TempDir dir;
  e2e::TempDir work(01777);
  // The fixture fails its first 80 runs. Before the breaker opens, each of
  // the 20 distinct payloads it needs runs at most twice (a payload judged
  // poison while an outage is suspected is parked, not retried), so 80 runs
  // leave room for the jobs in flight however slow the build.
  const std::string counter = shared_counter(work);
  const std::string store = dir.path() + "/store";
  const auto r = run_pillbox({"run", "--store", store, "--jobs", "2", "--json", "--breaker-probe-interval", "100ms",
                              "--writable", work.path(), "-",
                              "--", e2e::fixture("poison_corpus"), work.path(), counter, work.write("limit", "80")},
                             corpus(200));
  INFO(r.describe());
  // Every input has exactly one final verdict; a poison verdict given before
  // the breaker opened is taken back (a "taken-back" line) when it opens, so
  // such an input has three lines: quarantined, taken-back, ok.
  std::map<std::string, std::size_t> verdicts;
  std::map<std::string, std::string> last;
  for (const auto& rec : r.records) {
    ++verdicts[rec["verdict"].get<std::string>()];
    last[rec["key"]] = rec["verdict"];
  }
  REQUIRE(r.records.size() == 200 + verdicts["quarantined"] + verdicts["taken-back"]);
  REQUIRE(last.size() == 200);
  for (const auto& [key, verdict] : last) CHECK_MESSAGE(verdict == "ok", key);
  CHECK(verdicts["quarantined"] == verdicts["taken-back"]);
  CHECK(r.err.find("handler outage suspected") != std::string::npos);
  CHECK(r.err.find("dependency unavailable") != std::string::npos);  // the dominant failure is named
  CHECK(r.err.find("handler outage over") != std::string::npos);
  const std::string db = store + "/pillbox.db";
  CHECK(sql_int(db, "SELECT count(*) FROM quarantine WHERE status = 'quarantined'") == 0);
  CHECK(sql_int(db, "SELECT count(*) FROM tasks WHERE state = 'ok'") == 200);
  // Failures during the outage are on record but not held against the payloads.
  CHECK(sql_int(db, "SELECT count(*) FROM attempts WHERE charged = 0") >= 15);
}

TEST_CASE("an outage that outlasts the input holds the rest for the next run (exit 4), which finishes them") {
  e2e::TempDir dir;
  e2e::TempDir work(01777);
  const std::string counter = shared_counter(work);
  const std::string store = dir.path() + "/store";
  // Never healthy during the first run: 100 inputs, the outage lasts 1000 runs.
  const std::string limit = work.write("limit", "1000");
  const std::vector<std::string> args = {"run", "--store", store, "--jobs", "2", "--json", "--writable", work.path(),
                                         "--breaker-probe-interval",
                                         "20ms", "-", "--", e2e::fixture("poison_corpus"), work.path(), counter, limit};
  const auto first = run_pillbox(args, corpus(100));
  INFO(first.describe());
  CHECK(first.exit_code == 4);
  // The final verdict of each input (a poison verdict given before the
  // breaker opened is taken back when it opens).
  std::map<std::string, std::string> last;
  std::size_t taken_back = 0;
  for (const auto& rec : first.records) {
    last[rec["key"]] = rec["verdict"];
    taken_back += rec["verdict"] == "taken-back" ? 1 : 0;
  }
  std::size_t held = 0, quarantined = 0;
  for (const auto& [key, verdict] : last) {
    held += verdict == "held" ? 1 : 0;
    quarantined += verdict == "quarantined" ? 1 : 0;
  }
  CHECK(last.size() == 100);
  CHECK(first.records.size() == 100 + 2 * taken_back);  // quarantined, taken back, held
  CHECK(quarantined == 0);
  CHECK(held == 100);
  CHECK(first.err.find("held by a suspected outage") != std::string::npos);
  const std::string db = store + "/pillbox.db";
  CHECK(sql_int(db, "SELECT count(*) FROM tasks WHERE state = 'ok'") == 0);  // nothing marked done

  // The dependency is back: the same inputs, the same store.
  work.write("limit", "0");
  const auto second = run_pillbox(args, corpus(100));
  INFO(second.describe());
  CHECK(second.records.size() == held);
  for (const auto& rec : second.records) CHECK(rec["verdict"] == "ok");
  CHECK(sql_int(db, "SELECT count(*) FROM tasks WHERE state = 'ok'") == static_cast<long long>(held));
  if (quarantined > 0) {
    CHECK(second.err.find("skipped: 0 already ok and " + std::to_string(quarantined) + " already quarantined") !=
          std::string::npos);
  }
}

TEST_CASE("--no-breaker: a corpus of known crashers of one bug is quarantined, not taken for an outage") {
  e2e::TempDir dir;
  e2e::TempDir work(01777);
  std::string input;
  for (int i = 1; i <= 30; ++i) {
    input += nlohmann::json{{"key", "crasher-" + std::to_string(i)}, {"payload", "S crasher " + std::to_string(i)}}.dump() + "\n";
  }
  const auto r = run_pillbox({"run", "--store", dir.path() + "/store", "--jobs", "2", "--json", "--no-breaker",
                              "--writable", work.path(),
                              "--backoff-base", "10ms", "-", "--", e2e::fixture("poison_corpus"), work.path()},
                             input);
  INFO(r.describe());
  CHECK(r.exit_code == 1);
  CHECK(r.records.size() == 30);
  for (const auto& rec : r.records) CHECK(rec["verdict"] == "quarantined");
  CHECK(r.err.find("outage") == std::string::npos);
}
