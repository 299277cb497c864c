// The quarantine verbs on the fleet's quarantine (--redis URL --stream NAME,
// supervisor/broker/fleet_quarantine.h) against a real redis-server and real
// `pillbox worker` processes running the mixed_poison fixture (S: SIGSEGV,
// A: abort, L: spins, E: handler error, else echo): list prints what the
// store prints for the same payloads run through `pillbox run`; show, stats,
// export, discard, reproduce and minimize; replay redrives to a worker in the background, stops
// after --stop-after, resolves what a fixed worker runs ok, never redrives a
// record twice at once, and names the records whose outcome did not come.
#include <doctest/doctest.h>
#include <signal.h>
#include <sys/stat.h>

#include <cstdlib>
#include <map>
#include <nlohmann/json.hpp>
#include <set>
#include <string>
#include <vector>

#include "shared/base64.h"
#include "shared/sha256.h"
#include "tests/e2e/background.h"
#include "tests/e2e/redis_server.h"
#include "tests/e2e/support.h"

namespace {

using e2e::run_pillbox;
using nlohmann::json;

using Tasks = std::vector<std::pair<std::string, std::string>>;

// `pillbox quarantine VERB args... --redis URL --stream jobs`.
e2e::RunResult fleet(const e2e::RedisServer& server, std::vector<std::string> args) {
  args.insert(args.begin(), "quarantine");
  args.insert(args.end(), {"--redis", server.url(), "--stream", "jobs"});
  return run_pillbox(args);
}

std::vector<std::string> worker_args(const e2e::RedisServer& server, const std::vector<std::string>& extra,
                                     const std::vector<std::string>& command) {
  std::vector<std::string> args = {"worker", "--redis", server.url(), "--stream", "jobs", "--backoff-base", "10ms"};
  args.insert(args.end(), extra.begin(), extra.end());
  args.push_back("--");
  args.insert(args.end(), command.begin(), command.end());
  return args;
}

const std::vector<std::string>& poison() {
  static const std::vector<std::string> command = {e2e::fixture("mixed_poison")};
  return command;
}

// The fix: a worker whose command runs every payload ok (it echoes it).
const std::vector<std::string>& fixed() {
  static const std::vector<std::string> command = {"/bin/cat"};
  return command;
}

// Adds `tasks` and runs one worker over them until the stream is idle:
// the poison ones end in NAME:dlq.
void dead_letter(const e2e::RedisServer& server, const Tasks& tasks) {
  e2e::add_entries(server, "jobs", tasks);
  const auto r = run_pillbox(worker_args(server, {"--exit-when-idle", "500ms", "--quiet"}, poison()));
  INFO(r.describe());
  REQUIRE(r.exit_code == 0);
}

// The fleet's records by key (list --json).
std::map<std::string, json> records_by_key(const e2e::RedisServer& server, std::vector<std::string> filters = {}) {
  filters.insert(filters.begin(), {"list", "--json"});
  const auto listed = fleet(server, filters);
  INFO(listed.describe());
  REQUIRE(listed.exit_code == 0);
  std::map<std::string, json> out;
  for (const auto& r : listed.records) out[r["key"].get<std::string>()] = r;
  return out;
}

std::string id_of(const e2e::RedisServer& server, const std::string& key) {
  const auto records = records_by_key(server, {"--key", key});
  REQUIRE(records.count(key) == 1);
  return records.at(key)["id"].get<std::string>();
}

long long lock_keys(const e2e::RedisServer& server) {
  auto redis = e2e::connect(server);
  auto r = redis.command({"KEYS", "jobs:dlq:lock:*"});
  REQUIRE(r.has_value());
  return static_cast<long long>((*r)->elements);
}

TEST_CASE("fleet quarantine: list --json prints what the store prints for the same payloads run through `run`") {
  e2e::RedisServer server;
  REQUIRE_REDIS(server);
  const Tasks tasks = {{"segv", "S corrupt"}, {"abort", "A checksum"}, {"reject", "E rejected"},
                       {"good-1", "fine 1"},  {"good-2", "fine 2"},    {"binary", std::string("A\x00\xff", 3)}};
  dead_letter(server, tasks);

  e2e::TempDir dir;
  const std::string store = dir.path() + "/store";
  std::string input;
  for (const auto& [key, payload] : tasks) input += e2e::task_line(key, payload);
  const auto run = run_pillbox({"run", "--store", store, "--json", "--backoff-base", "10ms", "-", "--",
                                e2e::fixture("mixed_poison")},
                               input);
  INFO(run.describe());
  REQUIRE(run.exit_code == 1);
  const auto local = run_pillbox({"quarantine", "list", "--store", store, "--json"});
  REQUIRE(local.exit_code == 0);
  std::map<std::string, json> stored;
  for (const auto& r : local.records) stored[r["key"].get<std::string>()] = r;

  const auto fleet_records = records_by_key(server);
  REQUIRE(stored.size() == 4);
  REQUIRE(fleet_records.size() == stored.size());
  for (const auto& item : stored) {
    const auto& key = item.first;  // clang 14 cannot capture a structured binding
    const auto& s = item.second;
    INFO(key);
    REQUIRE(fleet_records.count(key) == 1);
    const json& f = fleet_records.at(key);
    std::set<std::string> store_fields, fleet_fields;
    for (const auto& [k, v] : s.items()) store_fields.insert(k);
    for (const auto& [k, v] : f.items()) fleet_fields.insert(k);
    // Only the fleet's records are signed (by the workers, with the fleet key).
    CHECK(f["signature"] == "valid");
    fleet_fields.erase("signature");
    CHECK(fleet_fields == store_fields);
    // The same failure, recorded the same way; only where it is and when
    // (and what the run cost) differ.
    for (const char* field : {"kind", "fingerprint", "signal", "exit_code", "syscall", "message", "crash_state",
                              "handler", "handler_identity", "handler_args", "exec_argv", "policy_identity",
                              "payload_sha256", "payload_size", "repeats", "status", "new_fingerprint"}) {
      CHECK_MESSAGE(f[field] == s[field], field);
    }
    CHECK(s["source"] == "run");
    CHECK(f["source"] == "worker");
    CHECK(f["id"].is_string());
    CHECK(f["store"] == "redis://127.0.0.1:" + std::to_string(server.port()) + "/0 jobs:dlq");
  }
  // The table has the store's columns.
  const auto table = fleet(server, {"list"});
  CHECK(table.exit_code == 0);
  CHECK(table.out.rfind("ID ", 0) == 0);
  for (const char* column : {" CREATED ", " STATUS ", " KIND ", " FINGERPRINT ", " KEY"}) {
    CHECK(table.out.find(column) != std::string::npos);
  }
  CHECK(table.err.find("4 records") != std::string::npos);
  const auto page = fleet(server, {"list", "--limit", "2", "--offset", "1"});
  CHECK(page.err.find("2 records shown (from 2) of 4") != std::string::npos);
}

TEST_CASE("fleet quarantine: show, stats, export, reproduce, minimize and discard; errors are one clear line") {
  e2e::RedisServer server;
  REQUIRE_REDIS(server);
  const std::string binary("A\x00\xff two", 7);
  dead_letter(server, {{"segv", "S one"}, {"abort-1", "A one"}, {"abort-2", binary}, {"reject", "E one"}});

  const auto stats = fleet(server, {"stats", "--json"});
  INFO(stats.describe());
  REQUIRE(stats.exit_code == 0);
  REQUIRE(stats.records.size() == 3);
  CHECK(stats.records[0]["records"] == 2);  // most records first: the abort
  CHECK(stats.records[0]["open"] == 2);
  // Its example is its newest record, as list (newest first) shows it.
  const auto group = fleet(server, {"list", "--json", "--fingerprint", stats.records[0]["fingerprint"]});
  REQUIRE(group.records.size() == 2);
  CHECK(stats.records[0]["example_id"] == group.records[0]["id"]);
  CHECK(fleet(server, {"stats"}).err.find("4 records in 3 groups") != std::string::npos);

  const std::string segv = id_of(server, "segv");
  const auto shown = fleet(server, {"show", segv, "--json"});
  INFO(shown.describe());
  REQUIRE(shown.records.size() == 1);
  const json& r = shown.records[0];
  CHECK(r["id"] == segv);
  CHECK(r["signal"] == "SIGSEGV");
  CHECK(r["payload_head_b64"] == pillbox::base64_encode("S one"));
  REQUIRE(r["attempt_history"].size() == 2);  // the same crash twice in a row
  CHECK(r["attempt_history"][1]["fingerprint"] == r["fingerprint"]);
  REQUIRE(r["audit"].size() == 1);
  CHECK(r["audit"][0]["action"] == "quarantined");
  CHECK(r["stream"]["deliveries"] == 2);
  CHECK_FALSE(r["policy"].get<std::string>().empty());
  const auto text = fleet(server, {"show", segv});
  CHECK(text.out.rfind("record " + segv + ": quarantined\n", 0) == 0);
  CHECK(text.out.find("crash state (innermost first):\n    corrupt_record") != std::string::npos);

  // reproduce: run here from the record's payload, handler and policy; the
  // verdict is kept with the record, as in the store.
  const auto reproduced = run_pillbox({"reproduce", segv, "--runs", "2", "--json", "--redis", server.url(), "--stream",
                                       "jobs"});
  INFO(reproduced.describe());
  CHECK(reproduced.exit_code == 0);
  REQUIRE(reproduced.records.size() == 1);
  CHECK(reproduced.records[0]["id"] == segv);
  CHECK(reproduced.records[0]["verdict"] == "reliable");
  CHECK(reproduced.records[0]["matches"] == 2);
  const json kept = records_by_key(server).at("segv");
  CHECK(kept["reproduce"] == json{{"verdict", "reliable"}, {"runs", 2}, {"matches", 2}});
  CHECK(fleet(server, {"show", segv}).out.find("reproduces   reliable: 2 of 2 runs") != std::string::npos);

  // export: the exact bytes; a bundle that reproduces the crash.
  e2e::TempDir dir;
  const std::string abort2 = id_of(server, "abort-2");
  const std::string file = dir.path() + "/payload.bin";
  const auto exported = fleet(server, {"export", abort2, "-o", file});
  INFO(exported.describe());
  REQUIRE(exported.exit_code == 0);
  CHECK(e2e::read_file(file) == binary);
  const std::string bundle = dir.path() + "/bundle";
  REQUIRE(fleet(server, {"export", abort2, "-o", bundle, "--bundle"}).exit_code == 0);
  const auto record = json::parse(e2e::read_file(bundle + "/record.json"));
  CHECK(record["id"] == abort2);
  CHECK(e2e::read_file(bundle + "/policy.policy") == record["policy"].get<std::string>());
  const std::string path = std::string(PILLBOX_BUILD_DIR) + ":" + (std::getenv("PATH") ? std::getenv("PATH") : "");
  const auto again = e2e::run_command(bundle + "/reproduce.sh", {"--json"}, "", {{"PATH", path}});
  INFO(again.describe());
  REQUIRE(again.records.size() == 1);
  CHECK(again.records[0]["fingerprint"] == record["fingerprint"]);
  const auto not_yet = fleet(server, {"export", abort2, "-o", dir.path() + "/m", "--minimized"});
  CHECK(not_yet.exit_code == 2);
  CHECK(not_yet.err.find("has no minimized payload (pillbox minimize " + abort2) != std::string::npos);

  // minimize: run here; the smallest payload that still aborts is kept with
  // the record (export --minimized), and a second session resumes, done.
  const auto minimized = run_pillbox({"minimize", abort2, "--json", "--redis", server.url(), "--stream", "jobs"});
  INFO(minimized.describe());
  REQUIRE(minimized.exit_code == 0);
  REQUIRE(minimized.records.size() == 1);
  CHECK(minimized.records[0]["id"] == abort2);
  CHECK(minimized.records[0]["original_size"] == binary.size());
  CHECK(minimized.records[0]["minimized_size"] == 1);  // "A": the first byte decides
  CHECK(minimized.records[0]["finished"] == true);
  REQUIRE(fleet(server, {"export", abort2, "-o", dir.path() + "/m", "--minimized"}).exit_code == 0);
  CHECK(e2e::read_file(dir.path() + "/m") == "A");
  CHECK(records_by_key(server).at("abort-2")["minimized_sha256"] == pillbox::sha256_hex("A"));
  const auto resumed = run_pillbox({"minimize", abort2, "--json", "--redis", server.url(), "--stream", "jobs"});
  REQUIRE(resumed.records.size() == 1);
  CHECK(resumed.records[0]["resumed"] == true);
  CHECK(resumed.records[0]["runs_this_session"] == 0);

  // discard: a bad id among good ones changes nothing; then the reason is kept.
  const std::string reject = id_of(server, "reject");
  const auto typo = fleet(server, {"discard", reject, "1-0", "--reason", "known"});
  CHECK(typo.exit_code == 2);
  CHECK(typo.err_lines().size() == 1);
  CHECK(typo.err.find("no record 1-0 in the fleet's quarantine") != std::string::npos);
  CHECK(records_by_key(server).at("reject")["status"] == "quarantined");
  const auto discarded = fleet(server, {"discard", reject, "--reason", "the handler rejects it by design"});
  INFO(discarded.describe());
  CHECK(discarded.exit_code == 0);
  CHECK(discarded.out == "record " + reject + " discarded (was quarantined)\n");
  CHECK(fleet(server, {"discard", reject, "--reason", "again"}).out == "record " + reject + " was already discarded\n");
  const auto after = fleet(server, {"show", reject, "--json"});
  REQUIRE(after.records.size() == 1);
  CHECK(after.records[0]["status"] == "discarded");
  REQUIRE(after.records[0]["audit"].size() == 2);
  CHECK(after.records[0]["audit"][1]["action"] == "discarded");
  CHECK(after.records[0]["audit"][1]["detail"] == "the handler rejects it by design (was quarantined)");
  CHECK(records_by_key(server, {"--status", "discarded"}).size() == 1);
  CHECK(records_by_key(server, {"--status", "quarantined"}).size() == 3);

  // Errors: one line each, exit 2 for what was asked wrong, 3 for Redis.
  const auto unknown = fleet(server, {"show", "12345-0"});
  CHECK(unknown.exit_code == 2);
  CHECK(unknown.err_lines().size() == 1);
  const auto malformed = fleet(server, {"show", "42"});
  CHECK(malformed.exit_code == 2);
  CHECK(malformed.err.find("dead-letter entry IDs") != std::string::npos);
  const int closed = e2e::free_loopback_port();
  const auto unreachable = run_pillbox({"quarantine", "list", "--redis", "redis://127.0.0.1:" + std::to_string(closed),
                                        "--stream", "jobs"});
  CHECK(unreachable.exit_code == 3);
  CHECK(unreachable.err_lines().size() == 1);
  CHECK(unreachable.err.find("cannot reach Redis at redis://127.0.0.1:" + std::to_string(closed)) != std::string::npos);
  auto redis = e2e::connect(server);
  REQUIRE(redis.command({"SET", "plain:dlq", "a string"}).has_value());
  const auto not_stream = run_pillbox({"quarantine", "list", "--redis", server.url(), "--stream", "plain"});
  CHECK(not_stream.exit_code == 3);
  CHECK(not_stream.err_lines().size() == 1);
  CHECK(not_stream.err.find("the key 'plain:dlq' on redis://127.0.0.1:" + std::to_string(server.port()) +
                            "/0 holds a string, not a dead-letter stream") != std::string::npos);
  const auto both = run_pillbox({"quarantine", "list", "--redis", server.url(), "--stream", "jobs", "--store", "/tmp"});
  CHECK(both.exit_code == 2);
  CHECK(run_pillbox({"quarantine", "purge", "--older-than", "1d", "--redis", server.url(), "--stream", "jobs"})
            .exit_code == 2);
  CHECK(run_pillbox({"quarantine", "list", "--redis", server.url()}).err.find("--redis needs --stream") !=
        std::string::npos);
}

TEST_CASE("fleet quarantine: replay redrives to the workers, stops after --stop-after, and a fix resolves the rest") {
  e2e::RedisServer server;
  REQUIRE_REDIS(server);
  // One bug, four records: the first batch is cut to two by --stop-after 2.
  dead_letter(server, {{"segv-1", "S 1"}, {"segv-2", "S 2"}, {"segv-3", "S 3"}, {"segv-4", "S 4"}});
  REQUIRE(records_by_key(server).size() == 4);
  const long long dead_letters = e2e::redis_integer(server, {"XLEN", "jobs:dlq"});

  {
    e2e::Background worker(e2e::pillbox_binary(), worker_args(server, {"--consumer", "still-broken"}, poison()));
    const auto replay = fleet(server, {"replay", "--all", "--stop-after", "2", "--json", "--batch-timeout", "60s"});
    INFO(replay.describe());
    CHECK(replay.exit_code == 1);
    CHECK(replay.err.find("replay stopped: 2 replayed payloads failed again with pb1-") != std::string::npos);
    CHECK(replay.err.find("4 selected, 2 replayed: 0 resolved, 2 failed again; 2 left as they were") !=
          std::string::npos);
    REQUIRE(replay.records.size() == 2);
    for (const auto& r : replay.records) {
      CHECK(r["replay"] == "failed-again");
      CHECK(r["kind"] == "crash");
      CHECK(r["fingerprint"] == r["original_fingerprint"]);
      CHECK(r["record_id"].is_string());
    }
    // --max-failure-ratio: the oldest two again (failed-again records are
    // replayed too), both fail, more than 40 % of the batch: it stops there.
    const auto ratio = fleet(server, {"replay", "--all", "--batch", "2", "--max-failure-ratio", "0.4"});
    INFO(ratio.describe());
    CHECK(ratio.exit_code == 1);
    CHECK(ratio.err.find("replay stopped: 2 of 2 payloads of a batch failed again (more than --max-failure-ratio "
                         "0.40)") != std::string::npos);
    CHECK(ratio.err.find("4 selected, 2 replayed") != std::string::npos);
    worker.signal(SIGTERM);
    CHECK(worker.wait() == 143);
  }
  const auto records = records_by_key(server);
  CHECK(records.size() == 4);  // a redrive's dead letter is an attempt of its record, not a record
  CHECK(e2e::redis_integer(server, {"XLEN", "jobs:dlq"}) == dead_letters + 4);
  std::map<std::string, std::vector<std::string>> by_status;
  for (const auto& [key, r] : records) by_status[r["status"].get<std::string>()].push_back(key);
  CHECK(by_status["failed-again"].size() == 2);
  CHECK(by_status["quarantined"].size() == 2);
  CHECK(lock_keys(server) == 0);
  REQUIRE_FALSE(by_status["failed-again"].empty());
  const auto shown = fleet(server, {"show", records.at(by_status["failed-again"][0])["id"].get<std::string>(), "--json"});
  REQUIRE(shown.records.size() == 1);
  const json& history = shown.records[0]["attempt_history"];
  REQUIRE(history.size() == 4);  // two deliveries, then the two redrives
  CHECK(history[2]["run"] == "still-broken");
  CHECK(history[3]["kind"] == "crash");
  const json& audit = shown.records[0]["audit"];
  REQUIRE(audit.size() == 5);
  CHECK(audit[1]["action"] == "redriven");
  CHECK(audit[2]["action"] == "replayed");
  CHECK(audit[2]["detail"].get<std::string>().rfind("failed again: crash", 0) == 0);

  // The fix is deployed: every record runs ok now, failed-again ones too.
  e2e::Background worker(e2e::pillbox_binary(), worker_args(server, {"--consumer", "fixed"}, fixed()));
  e2e::TempDir out;
  const auto replay = fleet(server, {"replay", "--all", "--batch", "3", "--out", out.path(), "--batch-timeout", "60s"});
  INFO(replay.describe());
  CHECK(replay.exit_code == 0);
  CHECK(replay.err.find("4 selected, 4 replayed: 4 resolved, 0 failed again") != std::string::npos);
  for (const auto& item : records_by_key(server)) {
    const auto& key = item.first;  // clang 14 cannot capture a structured binding
    const auto& r = item.second;
    INFO(key);
    CHECK(r["status"] == "resolved");
  }
  for (int i = 1; i <= 4; ++i) CHECK(e2e::read_file(out.path() + "/segv-" + std::to_string(i) + ".out") == "S " + std::to_string(i));
  CHECK(fleet(server, {"replay", "--all"}).err.find("4 matching records are resolved") != std::string::npos);
  CHECK(lock_keys(server) == 0);
}

TEST_CASE("fleet quarantine: a record being replayed is never redriven twice at once") {
  e2e::RedisServer server;
  REQUIRE_REDIS(server);
  dead_letter(server, {{"segv", "S once"}});
  const std::string id = id_of(server, "segv");
  REQUIRE(e2e::redis_integer(server, {"XLEN", "jobs"}) == 0);

  // No worker yet: the first replay redrives it and waits for its outcome.
  e2e::Background first(e2e::pillbox_binary(), {"quarantine", "replay", id, "--batch-timeout", "120s", "--redis",
                                                server.url(), "--stream", "jobs"});
  REQUIRE_MESSAGE(e2e::eventually([&] { return lock_keys(server) == 1; }), first.err());
  CHECK(records_by_key(server).at("segv")["status"] == "replaying");

  const auto second = fleet(server, {"replay", id});
  INFO(second.describe());
  CHECK(second.exit_code == 0);
  CHECK(second.err.find("skipped record " + id + " is being replayed right now by ") != std::string::npos);
  CHECK(second.err.find("not redriven twice at once") != std::string::npos);
  CHECK(second.err.find("0 selected") != std::string::npos);
  const auto by_filter = fleet(server, {"replay", "--all", "--force"});
  CHECK(by_filter.err.find("0 selected") != std::string::npos);
  const auto discard = fleet(server, {"discard", id, "--reason", "no"});
  CHECK(discard.exit_code == 2);
  CHECK(discard.err.find("is being replayed right now") != std::string::npos);
  CHECK(e2e::redis_integer(server, {"XLEN", "jobs"}) == 1);  // one redrive only

  // A fixed worker settles it; the first replay records the outcome.
  e2e::Background worker(e2e::pillbox_binary(), worker_args(server, {"--consumer", "fixed"}, fixed()));
  CHECK(first.wait() == 0);
  INFO(first.err());
  CHECK(first.out().find("#" + id + " ") == 0);
  CHECK(first.out().find("-> resolved") != std::string::npos);
  CHECK(records_by_key(server).at("segv")["status"] == "resolved");
  CHECK(lock_keys(server) == 0);
}

TEST_CASE("fleet quarantine: allow signs an allowance; replay --allowed redrives those only, never a forged one") {
  e2e::RedisServer server;  // its tests' processes get PILLBOX_FLEET_KEY: the workers sign, allow signs
  REQUIRE_REDIS(server);
  dead_letter(server, {{"allowed", "S 1"}, {"forged", "S 2"}, {"copied", "S 3"}, {"waiting", "S 4"}});
  const std::string allowed = id_of(server, "allowed"), forged = id_of(server, "forged");
  const std::string copied = id_of(server, "copied"), waiting = id_of(server, "waiting");

  const auto allow = fleet(server, {"allow", allowed, "--note", "looked at it", "--json"});
  INFO(allow.describe());
  REQUIRE(allow.exit_code == 0);
  CHECK(json::parse(allow.out) == json({{"allowed", {{{"id", allowed}, {"was", "quarantined"}}}},
                                        {"already_allowed", json::array()},
                                        {"changed", 1}}));
  const auto shown = fleet(server, {"show", allowed, "--json"});
  REQUIRE(shown.records.size() == 1);
  CHECK(shown.records[0]["status"] == "allowed");
  CHECK(shown.records[0]["allowance"]["signature"] == "valid");
  CHECK(shown.records[0]["audit"].back()["action"] == "allowed");
  CHECK(shown.records[0]["audit"].back()["detail"] == "looked at it (was quarantined)");

  // The attack: whoever can write NAME:dlq:state writes "allowed" for records
  // nobody allowed: the status alone, and the allowed record's own state
  // (its valid allowance) copied onto another.
  auto redis = e2e::connect(server);
  const auto status_only =
      redis.command({"HSET", "jobs:dlq:state", forged, R"({"status":"allowed","updated_at":1,"audit":[]})"});
  REQUIRE(status_only.has_value());
  auto state = redis.command({"HGET", "jobs:dlq:state", allowed});
  REQUIRE(state.has_value());
  const std::string allowed_state = pillbox::broker::reply_text(state->get());
  const auto copy = redis.command({"HSET", "jobs:dlq:state", copied, allowed_state});
  REQUIRE(copy.has_value());
  CHECK(records_by_key(server, {"--status", "allowed"}).size() == 3);  // the status is their claim
  CHECK(fleet(server, {"show", copied, "--json"}).records[0]["allowance"]["signature"] == "bad");
  CHECK(fleet(server, {"show", forged, "--json"}).records[0]["allowance"]["signature"] == "missing");

  const auto plan = fleet(server, {"replay", "--allowed", "--dry-run", "--json"});
  INFO(plan.describe());
  REQUIRE(plan.exit_code == 0);
  const json planned = json::parse(plan.out);
  REQUIRE(planned["records"].size() == 1);
  CHECK(planned["records"][0]["id"] == allowed);
  CHECK(planned["skipped"].dump().find("2 matching records (") != std::string::npos);
  CHECK(planned["skipped"].dump().find("have no valid allowance") != std::string::npos);
  // Named, each refused with why.
  const auto named = fleet(server, {"replay", "--allowed", forged, copied, "--dry-run"});
  INFO(named.describe());
  CHECK(named.out.find("would replay 0 records") != std::string::npos);
  CHECK(named.out.find("skipped: record " + forged + "'s allowance is unsigned") != std::string::npos);
  CHECK(named.out.find("skipped: record " + copied + "'s allowance does not match the fleet key") !=
        std::string::npos);

  {
    e2e::Background worker(e2e::pillbox_binary(), worker_args(server, {"--consumer", "fixed"}, fixed()));
    const auto replay = fleet(server, {"replay", "--allowed", "--batch-timeout", "60s"});
    INFO(replay.describe());
    CHECK(replay.exit_code == 0);
    CHECK(replay.err.find("1 selected, 1 replayed: 1 resolved") != std::string::npos);
    worker.signal(SIGTERM);
    CHECK(worker.wait() == 143);
  }
  const auto after = records_by_key(server);
  CHECK(after.at("allowed")["status"] == "resolved");
  CHECK(after.at("forged")["status"] == "allowed");  // never redriven
  CHECK(after.at("copied")["status"] == "allowed");
  CHECK(after.at("waiting")["status"] == "quarantined");
  CHECK(e2e::redis_integer(server, {"XLEN", "jobs:results"}) == 1);  // one redrive ran

  // Refused with why; revoked back to review.
  const auto resolved = fleet(server, {"allow", allowed});
  CHECK(resolved.exit_code == 2);
  CHECK(resolved.err.find("record " + allowed + " is resolved") != std::string::npos);
  const auto revoked = fleet(server, {"allow", "--revoke", forged});
  CHECK(revoked.exit_code == 0);
  CHECK(records_by_key(server).at("forged")["status"] == "quarantined");
  // Without the key an allowance is unsigned, and said so.
  const auto unsigned_allow = e2e::run_pillbox({"quarantine", "allow", waiting, "--redis", server.url(), "--stream",
                                                "jobs"},
                                               "", {{"PILLBOX_FLEET_KEY", ""}});
  CHECK(unsigned_allow.exit_code == 0);
  CHECK(unsigned_allow.err.find("no fleet key: these allowances are unsigned") != std::string::npos);
  CHECK(fleet(server, {"show", waiting, "--json"}).records[0]["allowance"]["signature"] == "missing");
}

TEST_CASE("fleet quarantine: a batch with no outcome in time (or stopped by SIGINT) names its records; their "
          "redrives are not repeated") {
  e2e::RedisServer server;
  REQUIRE_REDIS(server);
  dead_letter(server, {{"segv", "S late"}});
  const std::string id = id_of(server, "segv");

  const auto late = fleet(server, {"replay", id, "--batch-timeout", "300ms"});
  INFO(late.describe());
  CHECK(late.exit_code == 1);
  CHECK(late.err.find("replay stopped: no outcome within --batch-timeout 300 ms for record " + id) !=
        std::string::npos);
  CHECK(lock_keys(server) == 0);
  CHECK(records_by_key(server).at("segv")["status"] == "quarantined");
  const auto redrives = e2e::stream_entries(server, "jobs");
  REQUIRE(redrives.size() == 1);
  CHECK(redrives[0].fields.at("redrive_of") == id);
  CHECK(redrives[0].fields.at("payload") == "S late");

  // Its redrive still waits on the stream: not added again.
  const auto again = fleet(server, {"replay", id, "--batch-timeout", "300ms"});
  CHECK(again.err.find("its earlier redrive (entry " + redrives[0].id + " of jobs) still waits for a worker") !=
        std::string::npos);
  CHECK(e2e::redis_integer(server, {"XLEN", "jobs"}) == 1);

  // Once a worker settled it, the next replay records its outcome, found in
  // jobs:results, instead of redriving it again.
  const auto w = run_pillbox(worker_args(server, {"--exit-when-idle", "500ms", "--quiet"}, fixed()));
  REQUIRE(w.exit_code == 0);
  const auto now = fleet(server, {"replay", id, "--batch-timeout", "60s"});
  INFO(now.describe());
  CHECK(now.exit_code == 0);
  CHECK(now.err.find("1 record had been redriven by an earlier replay that did not record how it ended") !=
        std::string::npos);
  CHECK(records_by_key(server).at("segv")["status"] == "resolved");
  CHECK(e2e::redis_integer(server, {"XLEN", "jobs:results"}) == 1);  // one redrive, one outcome

  // SIGINT while a replay waits: it stops, names the record, lets go of its lock.
  dead_letter(server, {{"segv-2", "S later"}});
  const std::string second = id_of(server, "segv-2");
  e2e::Background waiting(e2e::pillbox_binary(), {"quarantine", "replay", second, "--batch-timeout", "120s", "--redis",
                                                  server.url(), "--stream", "jobs"});
  REQUIRE_MESSAGE(e2e::eventually([&] { return lock_keys(server) == 1; }), waiting.err());
  waiting.signal(SIGINT);
  CHECK(waiting.wait() == 130);
  CHECK(waiting.err().find("replay stopped: stopped by SIGINT; no outcome yet for record " + second) !=
        std::string::npos);
  CHECK(lock_keys(server) == 0);
  CHECK(records_by_key(server).at("segv-2")["status"] == "quarantined");
}

TEST_CASE("fleet quarantine: a replay SIGKILLed mid-way holds its records 20 s at most, and the next replay records "
          "what its redrives did instead of redriving them again") {
  // Broke (chaos review): the killed replay's records stayed "replaying"
  // until its locks ran out (~6 min), and the next replay redrove records
  // whose first redrive had already succeeded, a second time.
  e2e::RedisServer server;
  REQUIRE_REDIS(server);
  // The oldest record is not in the first replay: the second must redrive
  // it, with its own payload (broke: records kept in the plan before the
  // first whose outcome was found were emptied, and redriven as key "",
  // payload "").
  dead_letter(server, {{"segv-0", "S 0"}});
  Tasks tasks;
  for (int i = 1; i <= 10; ++i) tasks.emplace_back("segv-" + std::to_string(i), "S " + std::to_string(i));
  dead_letter(server, tasks);
  std::vector<std::string> first_args = {"quarantine", "replay"};
  for (const auto& [key, r] : records_by_key(server)) {
    if (key != "segv-0") first_args.push_back(r["id"].get<std::string>());
  }
  REQUIRE(first_args.size() == 12);

  // No worker yet: the replay redrives the ten and waits for their outcomes.
  first_args.insert(first_args.end(), {"--batch", "10", "--batch-timeout", "120s", "--redis", server.url(), "--stream", "jobs"});
  e2e::Background first(e2e::pillbox_binary(), first_args);
  REQUIRE_MESSAGE(e2e::eventually([&] {
                    return e2e::redis_integer(server, {"XLEN", "jobs"}) == 10 && lock_keys(server) == 10;
                  }),
                  first.err());
  {
    auto redis = e2e::connect(server);
    auto locks = redis.command({"KEYS", "jobs:dlq:lock:*"});
    REQUIRE(locks.has_value());
    for (std::size_t i = 0; i < (*locks)->elements; ++i) {
      const std::string lock = (*locks)->element[i]->str;
      const long long ms = e2e::redis_integer(server, {"PTTL", lock});
      CAPTURE(lock);
      CHECK(ms > 0);
      CHECK(ms <= 20'000);  // a lease: gone 20 s after its replay stopped renewing it
    }
  }
  first.signal(SIGKILL);
  first.wait();

  // The fix is deployed: a worker settles the ten redrives ok; nobody records them.
  const auto w = run_pillbox(worker_args(server, {"--exit-when-idle", "500ms", "--quiet"}, fixed()));
  INFO(w.describe());
  REQUIRE(w.exit_code == 0);
  CHECK(e2e::redis_integer(server, {"XLEN", "jobs"}) == 0);
  REQUIRE(e2e::redis_integer(server, {"XLEN", "jobs:results"}) == 10);
  for (const auto& [key, r] : records_by_key(server)) CHECK(r["status"] == (key == "segv-0" ? "quarantined" : "replaying"));
  // As the leases running out would (20 s).
  e2e::redis_integer(server, {"EVAL", "return redis.call('DEL', unpack(redis.call('KEYS', ARGV[1])))", "0",
                              "jobs:dlq:lock:*"});

  // The next replay: the ten outcomes are found, not redriven again; only
  // segv-0 is redriven, and a worker runs it.
  e2e::Background worker(e2e::pillbox_binary(), worker_args(server, {"--consumer", "fixed"}, fixed()));
  const auto second = fleet(server, {"replay", "--all", "--batch-timeout", "60s"});
  INFO(second.describe());
  CHECK(second.exit_code == 0);
  CHECK(second.err.find("10 records had been redriven by an earlier replay that did not record how they ended") !=
        std::string::npos);
  CHECK(second.err.find("11 selected, 11 replayed: 11 resolved, 0 failed again") != std::string::npos);
  worker.signal(SIGTERM);
  CHECK(worker.wait() == 143);
  const auto results = e2e::stream_entries(server, "jobs:results");
  CHECK(results.size() == 11);  // one redrive each
  std::set<std::string> keys;
  for (const auto& r : results) keys.insert(r.fields.at("key"));
  CHECK(keys.size() == 11);
  CHECK(keys.count("segv-0") == 1);
  CHECK(keys.count("") == 0);
  for (const auto& r : results) {
    if (r.fields.at("key") == "segv-0") CHECK(r.fields.at("output") == "S 0");
  }
  const auto records = records_by_key(server);
  for (const auto& [key, r] : records) CHECK(r["status"] == "resolved");
  const auto shown = fleet(server, {"show", records.at("segv-3")["id"].get<std::string>(), "--json"});
  REQUIRE(shown.records.size() == 1);
  const json& audit = shown.records[0]["audit"];
  REQUIRE(audit.size() == 3);  // dead-lettered, redriven (by the first), replayed (recorded by the second)
  CHECK(audit[1]["action"] == "redriven");
  CHECK(audit[2]["action"] == "replayed");
  CHECK(audit[2]["detail"].get<std::string>().find("redriven by an earlier replay that did not record how it ended, "
                                                   "found in jobs:results") != std::string::npos);
  CHECK(fleet(server, {"replay", "--all"}).err.find("11 matching records are resolved") != std::string::npos);
  CHECK(e2e::redis_integer(server, {"HEXISTS", "jobs:dlq:state", ""}) == 0);
}

}  // namespace

TEST_CASE("fleet quarantine: a dead letter keeps the tail of the program's stderr; show prints it, bytes made safe") {
  e2e::RedisServer server;
  REQUIRE_REDIS(server);
  e2e::add_entries(server, "jobs", Tasks{{"noisy", "x"}});
  // Exits 3 after a traceback-like stderr with a byte that is not UTF-8 and an
  // escape sequence: the tail goes into the dead letter as base64.
  const std::vector<std::string> command = {
      "/bin/sh", "-c", "cat >/dev/null; printf 'Traceback (most recent call last):\\n  oops \\377 \\033[31mred\\n' >&2; exit 3"};
  const auto r = run_pillbox(worker_args(server, {"--exit-when-idle", "500ms", "--quiet"}, command));
  INFO(r.describe());
  REQUIRE(r.exit_code == 0);
  const std::string id = id_of(server, "noisy");
  const auto shown = fleet(server, {"show", id});
  INFO(shown.describe());
  REQUIRE(shown.exit_code == 0);
  CHECK(shown.out.find("stderr (last ") != std::string::npos);
  CHECK(shown.out.find("  | Traceback (most recent call last):") != std::string::npos);
  CHECK(shown.out.find('\033') == std::string::npos);
  const auto as_json = fleet(server, {"show", id, "--json"});
  INFO(as_json.describe());
  REQUIRE(as_json.records.size() == 1);
  CHECK(as_json.records[0]["stderr_tail"].get<std::string>().find("oops") != std::string::npos);
}
