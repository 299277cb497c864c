// Retries and quarantine on real processes (issue 3): a corpus of good
// inputs, deterministic crashers, a flaky crasher, a catastrophic regex and a
// transient failure; what each one's verdict is, how many attempts the store
// counted, what a second run over the same store does; the alert hooks; and
// the store's file permissions.
#include <doctest/doctest.h>
#include <sys/stat.h>

#include <chrono>
#include <map>
#include <nlohmann/json.hpp>

#include "shared/sha256.h"
#include "tests/e2e/support.h"

using e2e::run_pillbox;
using e2e::task_line;
using e2e::sql_int;
using e2e::sql_rows;

namespace {

unsigned mode_of(const std::string& path) {
  struct stat st {};
  REQUIRE_MESSAGE(::lstat(path.c_str(), &st) == 0, path);
  return st.st_mode & 07777;
}

// Attempts the store counted, per key.
std::map<std::string, long long> attempts_by_key(const std::string& db) {
  std::map<std::string, long long> out;
  for (const auto& row : sql_rows(db, "SELECT t.key, count(a.n) FROM tasks t JOIN attempts a ON a.task_id = t.id "
                                      "GROUP BY t.key")) {
    out[row[0]] = std::stoll(row[1]);
  }
  return out;
}

}  // namespace

TEST_CASE("good ok once, deterministic crashers quarantined after exactly 2 attempts, the flaky one succeeds") {
  e2e::TempDir dir;
  e2e::TempDir markers(01777);  // the flaky fixture remembers what it has seen here
  const std::string store = dir.path() + "/store";
  std::string input;
  for (int i = 1; i <= 8; ++i) input += task_line("good-" + std::to_string(i), "good payload " + std::to_string(i));
  input += task_line("segv-1", "S first crasher");
  input += task_line("segv-2", "S second crasher, same bug");
  input += task_line("abort-1", "A checksum mismatch");
  input += task_line("flaky-1", "F crashes on its first attempt only");
  input += task_line("regex-1", "R" + std::string(28, 'a') + "b");
  input += task_line("transient-1", "T upstream busy");
  const std::vector<std::string> args = {"run", "--store", store, "--jobs", "2", "--json", "--backoff-base", "20ms",
                                         "--cpu", "1s", "--retry-exit-code", "75", "-", "--writable", markers.path(), "--",
                                         e2e::fixture("poison_corpus"), markers.path()};
  const auto r = run_pillbox(args, input);
  INFO(r.describe());
  CHECK(r.exit_code == 1);
  REQUIRE(r.records.size() == 14);  // one verdict per task, however many attempts

  for (int i = 1; i <= 8; ++i) {
    const auto& g = r.record("good-" + std::to_string(i));
    CHECK(g["verdict"] == "ok");
    CHECK(g["attempts"] == 1);
  }
  for (const char* key : {"segv-1", "segv-2", "abort-1", "regex-1"}) {
    const auto& q = r.record(key);
    INFO(key);
    CHECK(q["verdict"] == "quarantined");
    CHECK(q["attempts"] == 2);
    CHECK(q.contains("quarantine_id"));
  }
  CHECK(r.record("segv-1")["kind"] == "crash");
  CHECK(r.record("segv-1")["fingerprint"] == r.record("segv-2")["fingerprint"]);
  CHECK(r.record("abort-1")["fingerprint"] != r.record("segv-1")["fingerprint"]);
  CHECK(r.record("regex-1")["kind"] == "cpu-limit");
  const auto& flaky = r.record("flaky-1");
  CHECK(flaky["verdict"] == "ok");
  CHECK(flaky["attempts"] == 2);
  const auto& transient = r.record("transient-1");
  CHECK(transient["verdict"] == "gave-up");  // exit 75 is the host's problem, not the payload's
  CHECK(transient["attempts"] == 3);

  // The store agrees, attempt for attempt.
  const std::string db = store + "/pillbox.db";
  const auto attempts = attempts_by_key(db);
  for (int i = 1; i <= 8; ++i) CHECK(attempts.at("good-" + std::to_string(i)) == 1);
  for (const char* key : {"segv-1", "segv-2", "abort-1", "regex-1", "flaky-1"}) CHECK(attempts.at(key) == 2);
  CHECK(attempts.at("transient-1") == 3);
  CHECK(sql_int(db, "SELECT count(*) FROM attempts WHERE ended_at IS NULL") == 0);
  const auto quarantined = sql_rows(db, "SELECT key, kind, status, payload_size FROM quarantine ORDER BY key");
  REQUIRE(quarantined.size() == 4);
  CHECK(quarantined[0] == std::vector<std::string>{"abort-1", "crash", "quarantined", "19"});
  CHECK(quarantined[1][0] == "regex-1");
  CHECK(quarantined[1][1] == "cpu-limit");
  CHECK(quarantined[2][0] == "segv-1");
  CHECK(quarantined[3][0] == "segv-2");
  CHECK(sql_int(db, "SELECT count(*) FROM audit WHERE action = 'quarantined'") == 4);
  CHECK(sql_int(db, "SELECT count(*) FROM tasks WHERE state = 'ok'") == 9);
  CHECK(sql_int(db, "SELECT count(*) FROM tasks WHERE state = 'gave-up'") == 1);
  // The payload is kept byte for byte, addressed by its hash.
  CHECK(sql_rows(db, "SELECT p.data FROM payloads p JOIN quarantine q ON q.payload_sha256 = p.sha256 "
                     "WHERE q.key = 'abort-1'")[0][0] == "A checksum mismatch");

  SUBCASE("a second run over the same store runs only what is not finished") {
    const auto again = run_pillbox(args, input);
    INFO(again.describe());
    CHECK(again.exit_code == 1);  // the transient failure gives up again
    REQUIRE(again.records.size() == 14);  // every input says what became of it
    for (const auto& rec : again.records) {
      INFO(rec.dump());
      if (rec["key"] == "transient-1") {
        CHECK(rec["verdict"] == "gave-up");
        CHECK(rec["attempts"] == 6);  // attempts are remembered across runs
      } else {
        CHECK(rec["verdict"] == "skipped");
      }
    }
    CHECK(again.record("segv-1")["verdict_reason"] == "already quarantined in the store");
    CHECK(again.record("good-1")["verdict_reason"] == "already ok in the store");
    CHECK(again.err.find("skipped: 9 already ok and 4 already quarantined") != std::string::npos);
    CHECK(sql_int(db, "SELECT count(*) FROM quarantine") == 4);
  }

  SUBCASE("after purge, the poison is run again and quarantined anew: evidence is never silently missing") {
    const auto purge = run_pillbox({"quarantine", "purge", "--store", store, "--older-than", "0s", "--yes"});  // open records: confirmed
    INFO(purge.describe());
    CHECK(purge.exit_code == 0);
    CHECK(purge.out == "purged 4 records and 4 payloads\n");
    CHECK(sql_int(db, "SELECT count(*) FROM quarantine") == 0);
    const auto again = run_pillbox(args, input);
    INFO(again.describe());
    for (const char* key : {"segv-1", "segv-2", "abort-1", "regex-1"}) CHECK(again.record(key)["verdict"] == "quarantined");
    CHECK(sql_int(db, "SELECT count(*) FROM quarantine") == 4);
  }
}

TEST_CASE("arguments that are not UTF-8 are kept, not a crash") {
  e2e::TempDir dir;
  const auto r = run_pillbox({"run", "--store", dir.path() + "/store", "--json", "-", "--", "/bin/echo", "\xff\xfe"},
                             task_line("k", "x"));
  INFO(r.describe());
  CHECK(r.exit_code == 0);
  CHECK(r.record("k")["verdict"] == "ok");
}

TEST_CASE("--on-quarantine gets each new record as JSON; --on-new-fingerprint once per fingerprint") {
  e2e::TempDir dir;
  e2e::TempDir markers(01777);
  const std::string store = dir.path() + "/store";
  const std::string every = dir.file("every.jsonl");
  const std::string fresh = dir.file("fresh.jsonl");
  std::string input;
  for (int i = 1; i <= 3; ++i) input += task_line("segv-" + std::to_string(i), "S crasher " + std::to_string(i));
  input += task_line("abort-1", "A crasher");
  input += task_line("good-1", "fine");
  // --no-breaker: four crashers in a row would look like the start of an outage.
  const auto r = run_pillbox({"run", "--store", store, "--jobs", "2", "--json", "--backoff-base", "10ms", "--no-breaker",
                              "--on-quarantine", "cat >> " + every + "; echo >> " + every,
                              "--on-new-fingerprint", "cat >> " + fresh + "; echo >> " + fresh, "-", "--writable", markers.path(), "--",
                              e2e::fixture("poison_corpus"), markers.path()},
                             input);
  INFO(r.describe());
  CHECK(r.exit_code == 1);
  std::map<std::string, nlohmann::json> by_key;
  std::size_t lines = 0;
  for (const auto& path : {every, fresh}) {
    std::istringstream in(e2e::read_file(path));
    std::string line;
    while (std::getline(in, line)) {
      if (line.empty()) continue;
      auto j = nlohmann::json::parse(line);
      if (path == every) by_key[j["key"]] = j;
      ++lines;
    }
  }
  REQUIRE(by_key.size() == 4);
  CHECK(lines == 4 + 2);  // two fingerprints: segv and abort
  for (const auto& item : by_key) {
    const auto& key = item.first;  // clang 14 cannot capture a structured binding
    const auto& j = item.second;
    INFO(key);
    CHECK(j["status"] == "quarantined");
    CHECK(j["kind"] == "crash");
    CHECK(j["id"] == r.record(key)["quarantine_id"]);
    CHECK(j["attempts"] == 2);
    CHECK(j["payload_sha256"] == pillbox::sha256_hex(key == "abort-1" ? "A crasher" : "S crasher " + key.substr(5)));
    CHECK(j["store"] == store);
    // x-death style: both attempts, per kind, with first and last time.
    REQUIRE(j["attempts_by_kind"].size() == 1);
    CHECK(j["attempts_by_kind"][0]["kind"] == "crash");
    CHECK(j["attempts_by_kind"][0]["count"] == 2);
    CHECK(j["attempts_by_kind"][0]["first"] <= j["attempts_by_kind"][0]["last"]);
  }
  // The first of a fingerprint is new; its repeats are not.
  std::size_t new_ones = 0;
  for (const auto& [key, j] : by_key) new_ones += j["new_fingerprint"].get<bool>() ? 1 : 0;
  CHECK(new_ones == 2);
}

TEST_CASE("a hook that hangs or fails never blocks or fails the run") {
  e2e::TempDir dir;
  e2e::TempDir markers(01777);
  std::string input;
  for (int i = 1; i <= 3; ++i) input += task_line("segv-" + std::to_string(i), "S crasher " + std::to_string(i));
  const auto started = std::chrono::steady_clock::now();
  const auto r = run_pillbox({"run", "--store", dir.path() + "/store", "--jobs", "2", "--json", "--backoff-base", "10ms",
                              "--no-breaker", "--hook-timeout", "300ms", "--on-quarantine", "sleep 1234567", "--on-new-fingerprint",
                              "exit 7", "-", "--writable", markers.path(), "--", e2e::fixture("poison_corpus"), markers.path()},
                             input);
  const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - started).count();
  INFO(r.describe());
  CHECK(r.exit_code == 1);
  CHECK(r.records.size() == 3);
  CHECK(seconds < 30);
  CHECK(r.err.find("hook 'sleep 1234567' killed after 300 ms timeout") != std::string::npos);
  CHECK(r.err.find("hook 'exit 7' exited with status 7") != std::string::npos);
  // Killed, not merely abandoned. (A hook's shell may fork sleep; killed with
  // its group, sleep is reparented to init, and a container's init may leave
  // it a zombie: dead, so it does not count.)
  // (Other tests running at the same time have sleeps of their own: only
  // this hook's, by its argument, count.)
  auto sleepers = e2e::processes_of("/usr/bin/sleep");
  std::erase_if(sleepers, [](const e2e::ProcInfo& p) {
    return p.state == 'Z' || p.cmdline.size() < 2 || p.cmdline[1] != "1234567";
  });
  INFO(e2e::describe(sleepers));
  CHECK(sleepers.empty());
}

TEST_CASE("the store directory is 0700 and every file in it 0600, payload files too") {
  e2e::TempDir dir;
  e2e::TempDir markers(01777);
  const std::string store = dir.path() + "/store";
  const std::string db = store + "/pillbox.db";
  const std::string big = "S" + std::string(100 * 1024, 'x');  // beyond the inline limit: a file
  unsigned wal_mode = 0, shm_mode = 0;
  const auto r = run_pillbox(
      {"run", "--store", store, "--jobs", "1", "--json", "--backoff-base", "10ms", "-", "--writable", markers.path(), "--",
       e2e::fixture("poison_corpus"), markers.path()},
      task_line("good-1", "fine") + task_line("big-1", big) + task_line("good-2", "fine too"), {},
      [&](pid_t, std::size_t line_no, std::string_view) {
        if (line_no != 1) return;  // pillbox is running, its database open
        wal_mode = mode_of(db + "-wal");
        shm_mode = mode_of(db + "-shm");
      });
  INFO(r.describe());
  CHECK(r.record("big-1")["verdict"] == "quarantined");
  CHECK(mode_of(store) == 0700);
  CHECK(mode_of(db) == 0600);
  CHECK(wal_mode == 0600);
  CHECK(shm_mode == 0600);
  const std::string sha = pillbox::sha256_hex(big);
  CHECK(mode_of(store + "/payloads") == 0700);
  CHECK(mode_of(store + "/payloads/" + sha.substr(0, 2)) == 0700);
  const std::string file = store + "/payloads/" + sha.substr(0, 2) + "/" + sha;
  CHECK(mode_of(file) == 0600);
  CHECK(e2e::read_file(file) == big);
  CHECK(sql_int(db, "SELECT count(*) FROM payloads WHERE data IS NULL") == 1);
}
