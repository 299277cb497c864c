// The breaker's verdict must be right in both directions and never wait
// forever (issue 11, points 12-14):
//   * a deployment that breaks in the middle of a run quarantines no good
//     payload: verdicts given before the breaker opened are taken back;
//   * a burst of poison (a producer's bad batch, sorted together) is told
//     from an outage in one task, with a payload that succeeded earlier, and
//     the run goes on at full speed;
//   * a run whose every task fails stops after --breaker-max-wait (exit 4),
//     saying while it waits that it is paused and when it probes next.
#include <doctest/doctest.h>
#include <sys/stat.h>

#include <map>
#include <nlohmann/json.hpp>

#include "tests/e2e/support.h"

using e2e::run_pillbox;
using e2e::sql_int;

namespace {

bool contains(const std::string& s, const std::string& part) { return s.find(part) != std::string::npos; }

std::string line(const std::string& key, const std::string& payload) {
  return nlohmann::json{{"key", key}, {"payload", payload}}.dump() + "\n";
}

std::map<std::string, std::size_t> verdicts(const e2e::RunResult& r) {
  std::map<std::string, std::size_t> v;
  for (const auto& rec : r.records) ++v[rec["verdict"].get<std::string>()];
  return v;
}

// The fixture's run counter, shared by every task's uid.
std::string shared_counter(const e2e::TempDir& work) {
  const std::string path = work.write("runs", "");
  REQUIRE(::chmod(path.c_str(), 0666) == 0);
  return path;
}

}  // namespace

TEST_CASE("a deployment that breaks mid-run: poison verdicts given before the breaker opened are taken back") {
  e2e::TempDir dir;
  e2e::TempDir work(01777);
  const std::string counter = shared_counter(work);
  // Runs 31 to 110 fail ("dependency unavailable"): 30 good runs, then the
  // outage. No backoff, so the first payloads to fail are judged poison (the
  // same failure twice) before enough distinct payloads failed to open the
  // breaker: the verdicts this run must take back.
  const std::string limit = work.write("limit", "31-110");
  std::string input;
  for (int i = 1; i <= 150; ++i) input += line("doc-" + std::to_string(i), "document " + std::to_string(i));
  const std::string store = dir.path() + "/store";
  const auto r = run_pillbox({"run", "--store", store, "--jobs", "2", "--json", "--backoff-base", "0ms",
                              "--breaker-probe-interval", "50ms", "--writable", work.path(), "-", "--", e2e::fixture("poison_corpus"), work.path(),
                              counter, limit},
                             input);
  INFO(r.describe());
  CHECK(r.exit_code == 0);
  CHECK(contains(r.err, "handler outage suspected"));
  CHECK(contains(r.err, "which succeeded earlier in this run"));  // the probe is a known-good payload
  CHECK(contains(r.err, "took back"));
  CHECK(contains(r.err, "handler outage over"));
  const std::string db = store + "/pillbox.db";
  // Every task ends ok; nothing stays quarantined.
  CHECK(sql_int(db, "SELECT count(*) FROM tasks WHERE state = 'ok'") == 150);
  CHECK(sql_int(db, "SELECT count(*) FROM quarantine WHERE status = 'quarantined'") == 0);
  // What was quarantined before the breaker opened is released, audit-trailed.
  const long long released = sql_int(db, "SELECT count(*) FROM audit WHERE action = 'released'");
  CHECK(released >= 1);
  CHECK(sql_int(db, "SELECT count(*) FROM quarantine WHERE status = 'discarded'") == released);
  // The last line for each key is its verdict: ok for all.
  std::map<std::string, std::string> last;
  for (const auto& rec : r.records) last[rec["key"]] = rec["verdict"];
  CHECK(last.size() == 150);
  for (const auto& [key, verdict] : last) CHECK_MESSAGE(verdict == "ok", key);
}

TEST_CASE("a burst of poison is not an outage: one known-good probe, then full speed") {
  e2e::TempDir dir;
  // 300 good, a bad batch of 100 crashers sorted together, 300 good.
  std::string input;
  for (int i = 1; i <= 300; ++i) input += line("a-good-" + std::to_string(i), "fine " + std::to_string(i));
  for (int i = 1; i <= 100; ++i) input += line("b-bad-" + std::to_string(i), "S crasher " + std::to_string(i));
  for (int i = 1; i <= 300; ++i) input += line("c-good-" + std::to_string(i), "fine again " + std::to_string(i));
  const std::string store = dir.path() + "/store";
  // Probes every 2 s: waiting for fresh probes through the batch would take
  // minutes, so the time bound below tells the two ways apart.
  const auto r = run_pillbox({"run", "--store", store, "--jobs", "2", "--json", "--backoff-base", "0ms",
                              "--breaker-probe-interval", "2s", "--handler", e2e::poison_plugin(), "-"},
                             input);
  INFO(r.describe());
  CHECK(r.exit_code == 1);
  auto v = verdicts(r);
  CHECK(v.count("held") == 0);
  const std::string db = store + "/pillbox.db";
  CHECK(sql_int(db, "SELECT count(*) FROM tasks WHERE state = 'ok'") == 600);
  CHECK(sql_int(db, "SELECT count(*) FROM tasks WHERE state = 'quarantined'") == 100);
  CHECK(sql_int(db, "SELECT count(*) FROM quarantine WHERE status = 'quarantined'") == 100);
  if (contains(r.err, "handler outage suspected")) {
    CHECK(contains(r.err, "not an outage"));
    CHECK(contains(r.err, "burst of poison"));
  }
  MESSAGE("700 tasks with a burst of 100 crashers in " << r.seconds << " s");
  CHECK(r.seconds < 60);
}

TEST_CASE("a run whose every task fails stops after --breaker-max-wait with exit 4, saying so while it waits") {
  e2e::TempDir dir;
  e2e::TempDir work(01777);
  const std::string counter = shared_counter(work);
  const std::string limit = work.write("limit", "1000000");  // broken for good: an import error, say
  std::string input;
  for (int i = 1; i <= 120; ++i) input += line("doc-" + std::to_string(i), "document " + std::to_string(i));
  const std::string store = dir.path() + "/store";
  const auto r = run_pillbox({"run", "--store", store, "--jobs", "2", "--json", "--writable", work.path(),
                              "--breaker-probe-interval", "300ms",
                              "--breaker-max-wait", "3s", "-", "--", e2e::fixture("poison_corpus"), work.path(), counter,
                              limit},
                             input);
  INFO(r.describe());
  CHECK(r.exit_code == 4);
  CHECK(r.seconds < 60);
  CHECK(contains(r.err, "handler outage suspected"));
  CHECK(contains(r.err, "paused: handler outage suspected for"));
  CHECK(contains(r.err, "next probe at"));
  CHECK(contains(r.err, "(--breaker-max-wait): stopping"));
  CHECK(contains(r.err, "the rest of the input was not read"));
  auto v = verdicts(r);
  CHECK(v["held"] >= 20);
  CHECK(v["held"] + v["quarantined"] == r.records.size());
  CHECK(r.records.size() < 120);  // stopped before the end of the input
  const std::string db = store + "/pillbox.db";
  CHECK(sql_int(db, "SELECT count(*) FROM tasks WHERE state = 'ok'") == 0);
  CHECK(sql_int(db, "SELECT count(*) FROM quarantine WHERE status = 'quarantined'") == 0);  // the outage's verdicts were all parked or taken back
}
