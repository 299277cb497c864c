// pillbox quarantine replay (issue 4): controlled batches with stop
// conditions; a still-broken handler stops after exactly K failures and
// leaves the rest quarantined, a fixed one resolves them all; two replays at
// once never run a record twice; abandoned claims come back.
#include <doctest/doctest.h>
#include <unistd.h>

#include <nlohmann/json.hpp>
#include <set>
#include <thread>

#include "shared/base64.h"
#include "tests/e2e/support.h"

using e2e::run_pillbox;
using e2e::task_line;
using e2e::sql_int;
using e2e::sql_rows;

namespace {

// `segv` SIGSEGV records and `abort` SIGABRT records, one attempt each.
std::string quarantine(const e2e::TempDir& dir, int segv, int abort) {
  const std::string store = dir.path() + "/store";
  std::string input;
  for (int i = 0; i < segv; ++i) input += task_line("segv-" + std::to_string(i), "S payload " + std::to_string(i));
  for (int i = 0; i < abort; ++i) input += task_line("abort-" + std::to_string(i), "A payload " + std::to_string(i));
  const auto run = run_pillbox({"run", "--store", store, "--handler", e2e::poison_plugin(), "--max-attempts", "1", "--no-breaker",
                                "--jobs", "2", "-"},
                               input);
  INFO(run.describe());
  REQUIRE(sql_int(store + "/pillbox.db", "SELECT count(*) FROM quarantine") == segv + abort);
  return store;
}

std::string fingerprint_of(const std::string& db, const std::string& key_prefix) {
  return sql_rows(db, "SELECT DISTINCT fingerprint FROM quarantine WHERE key LIKE '" + key_prefix + "%'")[0][0];
}

long long count(const std::string& db, const std::string& where) {
  return sql_int(db, "SELECT count(*) FROM quarantine WHERE " + where);
}

}  // namespace

TEST_CASE("replay: a still-broken handler stops after exactly --stop-after 3; the fixed one resolves them all") {
  e2e::TempDir dir;
  const std::string store = quarantine(dir, 10, 5);
  const std::string db = store + "/pillbox.db";
  const std::string segv = fingerprint_of(db, "segv-");

  // Dry run: what would run, nothing changed.
  const auto dry = run_pillbox({"quarantine", "replay", "--fingerprint", segv, "--dry-run", "--store", store});
  INFO(dry.describe());
  CHECK(dry.exit_code == 0);
  CHECK(dry.out.find("would replay 10 records") != std::string::npos);
  CHECK(count(db, "status = 'quarantined'") == 15);

  // Under the plugin it was quarantined with, named again (issue 25).
  const auto broken = run_pillbox({"quarantine", "replay", "--fingerprint", segv, "--stop-after", "3", "--jobs", "2",
                                   "--batch", "4", "--json", "--store", store, "--handler", e2e::poison_plugin()});
  INFO(broken.describe());
  CHECK(broken.exit_code == 1);
  CHECK(broken.records.size() == 3);
  for (const auto& r : broken.records) {
    CHECK(r["replay"] == "failed-again");
    CHECK(r["fingerprint"] == segv);
  }
  CHECK(broken.err.find("replay stopped: 3 replayed payloads failed again with " + segv) != std::string::npos);
  CHECK(count(db, "fingerprint = '" + segv + "' AND status = 'failed-again'") == 3);
  CHECK(count(db, "fingerprint = '" + segv + "' AND status = 'quarantined'") == 7);
  CHECK(count(db, "status = 'replaying'") == 0);
  CHECK(count(db, "key LIKE 'abort-%' AND status = 'quarantined'") == 5);  // another fingerprint: untouched
  // The new attempt is appended to each task's history, not charged.
  CHECK(sql_int(db, "SELECT count(*) FROM attempts WHERE n = 2 AND charged = 0 AND kind = 'crash'") == 3);
  CHECK(sql_int(db, "SELECT count(*) FROM audit WHERE action = 'replayed' AND detail LIKE 'failed again: crash%'") == 3);

  // The fixed handler: every record of the fingerprint (failed-again ones too) resolves.
  const std::string out = dir.path() + "/out";
  const auto fixed = run_pillbox({"quarantine", "replay", "--fingerprint", segv, "--handler", e2e::poison_plugin(), "--arg",
                                  "fixed=yes", "--jobs", "2", "--json", "--out", out, "--store", store});
  INFO(fixed.describe());
  CHECK(fixed.exit_code == 0);
  CHECK(fixed.records.size() == 10);
  std::set<std::string> keys;
  for (const auto& r : fixed.records) {
    CHECK(r["replay"] == "resolved");
    CHECK(r["kind"] == "ok");
    keys.insert(r["key"].get<std::string>());
  }
  CHECK(keys.size() == 10);
  CHECK(count(db, "fingerprint = '" + segv + "' AND status = 'resolved'") == 10);
  CHECK(e2e::read_file(out + "/segv-3.out") == "S payload 3");  // results go where `run` puts them
  // Resolved ones are not replayed again without --force.
  const auto again = run_pillbox({"quarantine", "replay", "--fingerprint", segv, "--store", store});
  CHECK(again.err.find("10 matching records are resolved, discarded or being replayed") != std::string::npos);
  CHECK(again.err.find("0 replayed") != std::string::npos);
  const auto forced = run_pillbox({"quarantine", "replay", "1", "--force", "--handler", e2e::poison_plugin(), "--arg", "fixed=yes",
                                   "--store", store});
  CHECK(forced.exit_code == 0);
  CHECK(forced.err.find("1 replayed: 1 resolved") != std::string::npos);
}

TEST_CASE("replay: a batch whose failure ratio passes --max-failure-ratio stops the replay") {
  e2e::TempDir dir;
  const std::string store = quarantine(dir, 12, 0);
  const std::string db = store + "/pillbox.db";
  const auto r = run_pillbox({"quarantine", "replay", "--all", "--batch", "4", "--max-failure-ratio", "0.5", "--jobs",
                              "2", "--store", store, "--handler", e2e::poison_plugin()});
  INFO(r.describe());
  CHECK(r.exit_code == 1);
  CHECK(r.err.find("4 of 4 payloads of a batch failed again") != std::string::npos);
  CHECK(count(db, "status = 'failed-again'") == 4);
  CHECK(count(db, "status = 'quarantined'") == 8);
}

TEST_CASE("replay: two replays of the same selection at once replay each record once") {
  e2e::TempDir dir;
  const std::string store = quarantine(dir, 20, 10);
  const std::string db = store + "/pillbox.db";
  const std::vector<std::string> args = {"quarantine", "replay", "--all", "--batch", "3", "--jobs", "2", "--handler",
                                         e2e::poison_plugin(), "--arg", "fixed=yes", "--json", "--store", store};
  e2e::RunResult a, b;
  std::thread other([&] { b = run_pillbox(args); });
  a = run_pillbox(args);
  other.join();
  INFO(a.describe());
  INFO(b.describe());
  CHECK(a.exit_code == 0);
  CHECK(b.exit_code == 0);
  std::multiset<std::int64_t> ids;
  for (const auto* r : {&a, &b}) {
    for (const auto& rec : r->records) ids.insert(rec["record_id"].get<std::int64_t>());
  }
  CHECK(ids.size() == 30);
  CHECK(std::set<std::int64_t>(ids.begin(), ids.end()).size() == 30);  // none twice
  CHECK(count(db, "status = 'resolved'") == 30);
  CHECK(sql_int(db, "SELECT max(c) FROM (SELECT count(*) AS c FROM audit WHERE action = 'replayed' GROUP BY record_id)") == 1);
  CHECK(sql_int(db, "SELECT count(*) FROM attempts WHERE n = 2") == 30);
  MESSAGE("concurrent replays: " << a.records.size() << " + " << b.records.size() << " records");
}

TEST_CASE("replay: a claim left by a killed replay is taken back; --rate paces the starts") {
  e2e::TempDir dir;
  const std::string store = quarantine(dir, 10, 0);
  const std::string db = store + "/pillbox.db";
  char host[256] = {};
  ::gethostname(host, sizeof host - 1);
  // As if a replay (pid 2^22 + 1: never a live pid here) had been SIGKILLed mid-way.
  e2e::sql_write(db, "UPDATE quarantine SET status = 'replaying', status_before_replay = 'quarantined', "
                     "replay_claim = '" + std::string(host) + ":4194305:1' WHERE id <= 2");
  const auto r = run_pillbox({"quarantine", "replay", "--all", "--rate", "20", "--jobs", "2", "--handler", e2e::poison_plugin(),
                              "--arg", "fixed=yes", "--store", store});
  INFO(r.describe());
  CHECK(r.exit_code == 0);
  CHECK(r.err.find("took back 2 records from a replay that is gone") != std::string::npos);
  CHECK(count(db, "status = 'resolved'") == 10);
  CHECK(sql_int(db, "SELECT count(*) FROM audit WHERE action = 'replay abandoned'") == 2);
  // 10 starts at 20 per second: at least 9 intervals of 50 ms.
  CHECK(r.seconds >= 0.45);
}

TEST_CASE("replay: bad input is a clear error and changes nothing") {
  e2e::TempDir dir;
  const std::string store = quarantine(dir, 2, 0);
  const std::string db = store + "/pillbox.db";
  const struct {
    std::vector<std::string> args;
    const char* says;
  } cases[] = {
      {{"replay"}, "replay what?"},
      {{"replay", "1", "--all"}, "replay what?"},
      {{"replay", "77"}, "no quarantine record 77"},
      {{"replay", "--all", "--rate", "fast"}, "--rate expects a number"},
      {{"replay", "--all", "--max-failure-ratio", "1.5"}, "--max-failure-ratio expects a fraction"},
      {{"replay", "--all", "--arg", "x=y"}, "--arg goes with --handler"},
      {{"replay", "--all", "--policy", "nonexistent-policy"}, "nonexistent-policy"},
  };
  for (const auto& c : cases) {
    std::vector<std::string> args = {"quarantine"};
    args.insert(args.end(), c.args.begin(), c.args.end());
    args.insert(args.end(), {"--store", store});
    e2e::check_usage_error(args, c.says);
  }
  CHECK(count(db, "status = 'quarantined'") == 2);
  CHECK(sql_int(db, "SELECT count(*) FROM attempts") == 2);
}

TEST_CASE("replay: resolved under the handler it was quarantined with, the task is done; under another, it is not") {
  e2e::TempDir dir;
  e2e::TempDir work(01777);
  const std::string store = dir.path() + "/store";
  const std::string db = store + "/pillbox.db";
  // Crashes on runs 1, 4, 7...: quarantined on run 1, ok on run 2 (the replay).
  const std::vector<std::string> run_args = {"run", "--store", store, "--max-attempts", "1", "--json", "-", "--writable", work.path(), "--",
                                             e2e::fixture("poison_corpus"), work.path()};
  REQUIRE(run_pillbox(run_args, task_line("sometimes", "P one in three")).exit_code == 1);
  const auto r = run_pillbox({"quarantine", "replay", "1", "--store", store, "--writable", work.path()});
  INFO(r.describe());
  CHECK(r.exit_code == 0);
  CHECK(count(db, "status = 'resolved'") == 1);
  CHECK(sql_rows(db, "SELECT state, attempts FROM tasks") == std::vector<std::vector<std::string>>{{"ok", "2"}});
  // A run over the same input skips it as done.
  const auto again = run_pillbox(run_args, task_line("sometimes", "P one in three"));
  INFO(again.describe());
  CHECK(again.exit_code == 0);
  REQUIRE(again.records.size() == 1);
  CHECK(again.records[0]["verdict"] == "skipped");
  CHECK(again.records[0]["verdict_reason"] == "already ok in the store");

  // Resolved under a fixed handler (another identity), the task is done too
  // (issue 26, point 1): the replay's output is its result.
  const std::string other = dir.path() + "/other";
  REQUIRE(run_pillbox({"run", "--store", other, "--handler", e2e::poison_plugin(), "--max-attempts", "1", "-"}, task_line("k", "S x"))
              .exit_code == 1);
  REQUIRE(run_pillbox({"quarantine", "replay", "1", "--handler", e2e::poison_plugin(), "--arg", "fixed=yes", "--store", other})
              .exit_code == 0);
  CHECK(sql_rows(other + "/pillbox.db", "SELECT state FROM tasks") == std::vector<std::vector<std::string>>{{"ok"}});
  CHECK(sql_rows(other + "/pillbox.db", "SELECT record_id, revision FROM results") ==
        std::vector<std::vector<std::string>>{{"1", "0"}});
}

TEST_CASE("replay: a record whose payload cannot be read is left as it was; the rest of its batch still runs") {
  e2e::TempDir dir;
  const std::string store = quarantine(dir, 3, 0);
  const std::string db = store + "/pillbox.db";
  // Record 2's payload damaged in the store: its bytes no longer match their hash.
  e2e::sql_write(db, "UPDATE payloads SET data = x'00' WHERE sha256 = "
                     "(SELECT payload_sha256 FROM quarantine WHERE id = 2)");
  const auto r = run_pillbox({"quarantine", "replay", "--all", "--batch", "3", "--jobs", "2", "--handler",
                              e2e::poison_plugin(), "--arg", "fixed=yes", "--store", store});
  INFO(r.describe());
  CHECK(r.exit_code == 3);  // the store's fault, said as such
  CHECK(r.err.find("skipped record 2: its payload cannot be read") != std::string::npos);
  CHECK(r.err.find("left as it was") != std::string::npos);
  CHECK(r.err.find("2 replayed: 2 resolved") != std::string::npos);
  CHECK(count(db, "status = 'resolved'") == 2);
  CHECK(count(db, "id = 2 AND status = 'quarantined'") == 1);
  CHECK(count(db, "status = 'replaying'") == 0);  // its claim was given back
}

TEST_CASE("replay --allowed: only what an operator allowed runs; allow says why it refuses, and is audited") {
  e2e::TempDir dir;
  const std::string store = quarantine(dir, 4, 1);
  const std::string db = store + "/pillbox.db";
  auto id_of = [&](const std::string& key) {
    return sql_rows(db, "SELECT id FROM quarantine WHERE key = '" + key + "'")[0][0];
  };
  auto status_of = [&](const std::string& id) {
    return sql_rows(db, "SELECT status FROM quarantine WHERE id = " + id)[0][0];
  };
  const std::string s0 = id_of("segv-0"), s1 = id_of("segv-1"), s2 = id_of("segv-2"), s3 = id_of("segv-3");
  // Nothing allowed yet: --allowed has nothing to run.
  const auto none = run_pillbox({"quarantine", "replay", "--allowed", "--store", store});
  INFO(none.describe());
  CHECK(none.exit_code == 0);
  CHECK(none.err.find("5 matching records are not allowed to replay") != std::string::npos);
  CHECK(count(db, "status = 'quarantined'") == 5);

  const auto allowed = run_pillbox({"quarantine", "allow", s0, s1, "--note", "read the traces", "--json",
                                    "--store", store});
  INFO(allowed.describe());
  REQUIRE(allowed.exit_code == 0);
  const auto answer = nlohmann::json::parse(allowed.out);
  CHECK(answer["changed"] == 2);
  CHECK(answer["allowed"][0] == nlohmann::json({{"id", std::stoll(s0)}, {"was", "quarantined"}}));
  CHECK(status_of(s0) == "allowed");
  // Who and when, as every state change.
  const auto shown = run_pillbox({"quarantine", "show", s0, "--json", "--store", store});
  REQUIRE(shown.exit_code == 0);
  const auto record = nlohmann::json::parse(shown.out);
  CHECK(record["status"] == "allowed");
  CHECK(record["audit"].back()["action"] == "allowed");
  CHECK(record["audit"].back()["detail"] == "read the traces (was quarantined)");
  CHECK_FALSE(record["audit"].back()["actor"].get<std::string>().empty());
  CHECK(run_pillbox({"quarantine", "list", "--status", "allowed", "--json", "--store", store}).records.size() == 2);
  CHECK(run_pillbox({"quarantine", "stats", "--store", store}).err.find("2 allowed") != std::string::npos);
  CHECK(run_pillbox({"quarantine", "allow", s0, "--store", store}).out == "record " + s0 + " was already allowed\n");

  // Revoked: back to review.
  const auto revoked = run_pillbox({"quarantine", "allow", "--revoke", s1, "--store", store});
  CHECK(revoked.exit_code == 0);
  CHECK(revoked.out == "record " + s1 + " back to quarantined, its allowance revoked (was allowed)\n");
  CHECK(status_of(s1) == "quarantined");

  // The dry run and the replay take that one record only.
  const auto dry = run_pillbox({"quarantine", "replay", "--allowed", "--dry-run", "--json", "--store", store});
  INFO(dry.describe());
  CHECK(dry.exit_code == 0);
  const auto plan = nlohmann::json::parse(dry.out);
  REQUIRE(plan["records"].size() == 1);
  CHECK(plan["records"][0]["id"] == std::stoll(s0));
  const auto replayed = run_pillbox({"quarantine", "replay", "--allowed", "--json", "--store", store, "--handler",
                                     e2e::poison_plugin(), "--arg", "fixed=yes"});
  INFO(replayed.describe());
  CHECK(replayed.exit_code == 0);
  REQUIRE(replayed.records.size() == 1);
  CHECK(replayed.records[0]["key"] == "segv-0");
  CHECK(status_of(s0) == "resolved");
  CHECK(count(db, "status = 'quarantined'") == 4);

  // Refused with why, nothing changed: resolved, discarded; one named beside them is not allowed either.
  REQUIRE(run_pillbox({"quarantine", "discard", s2, "--reason", "by design", "--store", store}).exit_code == 0);
  const auto trail = sql_int(db, "SELECT count(*) FROM audit");
  const auto resolved = run_pillbox({"quarantine", "allow", s3, s0, "--store", store});
  CHECK(resolved.exit_code == 2);
  CHECK(resolved.err.find("record " + s0 + " is resolved: a replay ran it ok; there is nothing to allow") !=
        std::string::npos);
  const auto discarded = run_pillbox({"quarantine", "allow", s2, "--store", store});
  CHECK(discarded.exit_code == 2);
  CHECK(discarded.err.find("record " + s2 + " is discarded") != std::string::npos);
  CHECK(status_of(s3) == "quarantined");
  CHECK(sql_int(db, "SELECT count(*) FROM audit") == trail);
  CHECK(run_pillbox({"quarantine", "allow", "--store", store}).exit_code == 2);  // allow what?

  // By a filter: the matching records awaiting review; the rest counted.
  const std::string segv = fingerprint_of(db, "segv-");
  const auto by_fp = run_pillbox({"quarantine", "allow", "--fingerprint", segv, "--store", store});
  INFO(by_fp.describe());
  CHECK(by_fp.exit_code == 0);
  CHECK(by_fp.err.find("2 records allowed") != std::string::npos);
  CHECK(by_fp.err.find("2 matching records left as they are") != std::string::npos);  // resolved, discarded
  CHECK(count(db, "status = 'allowed'") == 2);
  // A patch sends an allowed record back to review: what it would run changed.
  const std::string fix = dir.write("fix", "fine now");
  const auto patched = run_pillbox({"quarantine", "patch", s3, "--payload-file", fix, "--note", "n", "--store", store});
  INFO(patched.describe());
  CHECK(patched.exit_code == 0);
  CHECK(patched.out.find("it awaits review again") != std::string::npos);
  CHECK(status_of(s3) == "quarantined");
  CHECK(sql_rows(db, "SELECT action FROM audit WHERE record_id = " + s3 + " ORDER BY id DESC LIMIT 1")[0][0] ==
        "allowance revoked");
}
