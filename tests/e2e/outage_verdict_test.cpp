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

#include <cstdio>
#include <map>
#include <set>
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

TEST_CASE("a deployment that breaks mid-run: no good payload is quarantined, not even for a moment") {
  e2e::TempDir dir;
  e2e::TempDir work(01777);
  const std::string counter = shared_counter(work);
  // Runs 31 to 110 fail ("dependency unavailable"): 30 good runs, then the
  // outage. No backoff, so the first payloads to fail are judged poison (the
  // same failure twice) long before enough distinct payloads failed to open
  // the breaker: a payload that failed like others waits for a known-good
  // check, which fails (the outage). One judged while no other had failed
  // yet is quarantined, then taken back when the outage shows.
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
  CHECK(contains(r.err, "which succeeded earlier in this run, fails now"));  // the check is a known-good payload
  CHECK(contains(r.err, "the handler is down, not the payloads"));
  CHECK(contains(r.err, "handler outage over"));
  const std::string db = store + "/pillbox.db";
  // Every task ends ok; nothing stays quarantined.
  CHECK(sql_int(db, "SELECT count(*) FROM tasks WHERE state = 'ok'") == 150);
  CHECK(sql_int(db, "SELECT count(*) FROM quarantine WHERE status = 'quarantined'") == 0);
  // What was quarantined before the breaker opened (if anything) is
  // released, audit-trailed.
  const long long released = sql_int(db, "SELECT count(*) FROM audit WHERE action = 'released'");
  CHECK(sql_int(db, "SELECT count(*) FROM quarantine WHERE status = 'discarded'") == released);
  CHECK(sql_int(db, "SELECT count(*) FROM quarantine") == released);
  CHECK(released <= 1);
  // The last line for each key is its verdict: ok for all.
  std::map<std::string, std::string> last;
  for (const auto& rec : r.records) last[rec["key"]] = rec["verdict"];
  CHECK(last.size() == 150);
  for (const auto& kv : last) CHECK_MESSAGE(kv.second == "ok", kv.first);
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
    // Told apart either by the known-good probe (when the breaker opens a
    // second time on that fingerprint: "a burst of poison") or, when it
    // opened once, by the rechecks of the parked payloads ("bad inputs
    // together"); which comes first is the scheduler's.
    CHECK(contains(r.err, "not an outage"));
    CHECK((contains(r.err, "burst of poison") || contains(r.err, "bad inputs together")));
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

TEST_CASE("a sorted folder is not an outage: bad files in a row give one record each and one JSON line per task") {
  // Issue 26, point 5: a user's parser over a folder where the bad exports
  // sort together (17 in a row, 3 more elsewhere). The handler is healthy:
  // each bad file is one quarantine record, each file one JSON line, and
  // no verdict is taken back.
  if (!e2e::have_python3()) return;
  const e2e::Project p;
  p.dir.write("parse_records.py",
              "import sys, datetime\n"
              "def parse_date(s):\n"
              "    return datetime.date.fromisoformat(s)\n"
              "for line in open(sys.argv[1]):\n"
              "    name, born = line.strip().split(',')\n"
              "    print(name.upper(), parse_date(born).year)\n");
  ::mkdir(p.dir.file("exports").c_str(), 0755);
  std::set<int> bad;
  for (int i = 140; i < 157; ++i) bad.insert(i);
  bad.insert(12);
  bad.insert(77);
  bad.insert(250);
  for (int i = 1; i <= 300; ++i) {
    char name[64];
    std::snprintf(name, sizeof name, "exports/contacts-%03d.csv", i);
    p.dir.write(name, bad.count(i) ? "ann," + std::to_string(i) + "/01/1990\n" : "ann,1990-01-02\nbob,1985-12-31\n");
  }
  e2e::TempDir store;
  const std::string s = store.path() + "/s";
  const auto r = e2e::pillbox_in(p.parent, {"run", "--store", s, "--json", "--jobs", "2", p.name + "/exports", "--",
                                            e2e::kPython3, p.name + "/parse_records.py", "{}"});
  INFO(r.describe());
  CHECK(r.exit_code == 1);
  CHECK(r.records.size() == 300);
  std::map<std::string, std::size_t> lines_per_key;
  for (const auto& rec : r.records) ++lines_per_key[rec["key"].get<std::string>()];
  CHECK(lines_per_key.size() == 300);
  const auto v = verdicts(r);
  CHECK(v.count("taken-back") == 0);
  CHECK(v.at("ok") == 280);
  CHECK(v.at("quarantined") == 20);
  const std::string db = s + "/pillbox.db";
  CHECK(sql_int(db, "SELECT count(*) FROM quarantine") == 20);
  CHECK(sql_int(db, "SELECT count(*) FROM quarantine WHERE status = 'quarantined'") == 20);
  CHECK(sql_int(db, "SELECT count(DISTINCT fingerprint) FROM quarantine") == 1);
  CHECK(sql_int(db, "SELECT count(*) FROM audit WHERE action = 'released'") == 0);
  CHECK_FALSE(contains(r.err, "handler outage suspected"));
}
