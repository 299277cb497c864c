// pillbox quarantine replay --amqp against a real rabbitmq-server the test
// starts itself (rabbit_server.h; one broker, one test case, a function per
// case): dead letters republished to NAME in batches with their message_id,
// correlation_id, reply_to and key, and the replay's tag; each batch's
// outcomes waited for (the workers' notices in NAME.dlq.state, dead letters
// in NAME.dlq); --stop-after stops it; a fix resolves the rest and the
// results go where users take them (an RPC's reply queue, NAME.results); a
// redrive's dead letter is an attempt of its record, not a record; a record
// locked by another connection is not republished, nor discarded; a replay
// SIGKILLed leaves no lock, and its redrive is neither lost nor repeated;
// replay --allowed republishes only what an operator allowed, never a
// record whose state a publisher to NAME.dlq.state forged as allowed.
#include <doctest/doctest.h>
#include <signal.h>

#include <algorithm>
#include <chrono>
#include <map>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "shared/sha256.h"
#include "supervisor/broker/amqp_connection.h"
#include "supervisor/broker/fleet_allowance.h"
#include "tests/e2e/amqp_client.h"
#include "tests/e2e/background.h"
#include "tests/e2e/rabbit_server.h"
#include "tests/e2e/support.h"

using json = nlohmann::json;
using pillbox::broker::AmqpConnection;
using pillbox::broker::AmqpMessage;
using pillbox::broker::AmqpOutgoing;
using pillbox::broker::AmqpValue;
using e2e::run_pillbox;

using e2e::drain;
using e2e::header_text;
using e2e::ready;
namespace {

struct Fleet {
  e2e::RabbitServer& server;
  std::string key;  // the fleet key's file

  std::vector<std::string> worker(const std::string& queue, const std::string& consumer, bool fixed,
                                  const std::vector<std::string>& extra = {}) const {
    std::vector<std::string> args = {"worker", "--amqp", server.url(), "--queue", queue, "--consumer", consumer,
                                     "--max-attempts", "1", "--fleet-key", key, "--backoff-base", "10ms"};
    args.insert(args.end(), extra.begin(), extra.end());
    // Fixed: every payload echoed (ok); else mixed_poison, whose "S ..." crash.
    args.insert(args.end(), {"--", fixed ? std::string("/bin/cat") : e2e::fixture("mixed_poison")});
    return args;
  }
  e2e::RunResult quarantine(const std::string& queue, const std::vector<std::string>& verb) const {
    auto args = e2e::quarantine_args(server, queue, verb);
    args.insert(args.end(), {"--fleet-key", key});
    return run_pillbox(args);
  }
  // key -> its record as list --json shows it.
  std::map<std::string, json> records(const std::string& queue) const {
    const auto r = quarantine(queue, {"list", "--json"});
    REQUIRE_MESSAGE(r.exit_code == 0, r.describe());
    std::map<std::string, json> out;
    for (const json& j : r.records) out[j.value("key", "")] = j;
    return out;
  }
};

AmqpOutgoing task(const std::string& key, std::string_view payload) {
  AmqpOutgoing m;
  m.body = payload;
  m.message_id = "msg-" + key;
  m.headers = {{"key", key}};
  return m;
}

// Whether the queue exists (its lock, for a replay's lock).
bool exists(AmqpConnection& c, const std::string& queue) {
  if (c.check_queue(queue)) return true;
  REQUIRE(c.refusal().has_value());
  return c.refusal()->code != 404;  // 405: another connection's, exclusive
}

// Publishes `tasks` to `queue` and has a broken worker dead-letter each.
void dead_letter(const Fleet& fleet, const std::string& queue, const std::vector<AmqpOutgoing>& tasks) {
  // A worker declares the topology (NAME must exist for a publish to it).
  const auto declared = run_pillbox(fleet.worker(queue, "broken", false, {"--exit-when-idle", "200ms", "--quiet"}));
  REQUIRE_MESSAGE(declared.exit_code == 0, declared.describe());
  auto c = e2e::amqp_connect(fleet.server);
  REQUIRE(c.confirm_publishes().is_ok());
  for (const AmqpOutgoing& m : tasks) REQUIRE(c.publish(queue, m).is_ok());
  REQUIRE(c.wait_confirmed().is_ok());
  const auto w = run_pillbox(fleet.worker(queue, "broken", false, {"--exit-when-idle", "1500ms", "--quiet"}));
  REQUIRE_MESSAGE(w.exit_code == 0, w.describe());
  REQUIRE(fleet.records(queue).size() == tasks.size());
}

// --stop-after stops a replay on a worker still broken; once fixed, every
// record resolves and each result goes where its user looks.
void stops_then_resolves(const Fleet& fleet) {
  AmqpOutgoing rpc = task("rpc", "S rpc");
  rpc.correlation_id = "req-9";
  rpc.reply_to = "replies";
  auto c = e2e::amqp_connect(fleet.server);
  REQUIRE(c.declare_queue("replies", {}).has_value());
  dead_letter(fleet, "crashes", {task("segv-1", "S 1"), task("segv-2", "S 2"), task("segv-3", "S 3"), rpc});
  CHECK(drain(c, "replies").empty());

  {
    e2e::Background broken(e2e::pillbox_binary(), fleet.worker("crashes", "still-broken", false));
    const auto replay =
        fleet.quarantine("crashes", {"replay", "--all", "--stop-after", "1", "--json", "--batch-timeout", "60s"});
    INFO(replay.describe());
    CHECK(replay.exit_code == 1);
    CHECK(replay.err.find("replay stopped: 1 replayed payloads failed again with pb1-") != std::string::npos);
    CHECK(replay.err.find("4 selected, 1 replayed: 0 resolved, 1 failed again; 3 left as they were") !=
          std::string::npos);
    REQUIRE(replay.records.size() == 1);
    CHECK(replay.records[0]["replay"] == "failed-again");
    CHECK(replay.records[0]["kind"] == "crash");
    CHECK(replay.records[0]["fingerprint"] == replay.records[0]["original_fingerprint"]);
    broken.signal(SIGTERM);
    CHECK(broken.wait() == 143);
  }
  // The redrive's dead letter (offset 4) is an attempt of the record it
  // replayed, shown there, not a record of its own.
  // (The oldest record, offset 0: whichever the broken worker dead-lettered first.)
  auto records = fleet.records("crashes");
  CHECK(records.size() == 4);
  std::map<std::string, int> statuses;
  std::string first;
  for (const auto& item : records) {
    ++statuses[item.second["status"].get<std::string>()];
    if (item.second["status"] == "failed-again") first = item.second["id"].dump();
  }
  CHECK(statuses == std::map<std::string, int>{{"failed-again", 1}, {"quarantined", 3}});
  CHECK(first == "0");
  const auto attempt = fleet.quarantine("crashes", {"show", "4"});
  CHECK(attempt.exit_code == 2);
  CHECK(attempt.err.find("4 is the dead letter of a replay of record " + first) != std::string::npos);
  const auto shown = fleet.quarantine("crashes", {"show", first, "--json"});
  REQUIRE_MESSAGE(shown.records.size() == 1, shown.describe());
  const json& history = shown.records[0]["attempt_history"];
  REQUIRE(history.size() == 2);  // its delivery, then the redrive
  CHECK(history[1]["run"] == "still-broken");
  CHECK(history[1]["kind"] == "crash");
  const json& audit = shown.records[0]["audit"];
  REQUIRE(audit.size() == 3);
  CHECK(audit[1]["action"] == "redriven");
  CHECK(audit[2]["action"] == "replayed");
  CHECK(audit[2]["detail"].get<std::string>().rfind("failed again: crash", 0) == 0);

  // The fix is deployed: every record runs ok, the failed-again one too.
  e2e::Background fixed(e2e::pillbox_binary(), fleet.worker("crashes", "fixed", true));
  const auto started = std::chrono::steady_clock::now();
  const auto replay =
      fleet.quarantine("crashes", {"replay", "--all", "--batch", "3", "--batch-timeout", "60s", "--json"});
  MESSAGE("4 records replayed in 2 batches (3 + 1) in "
          << std::chrono::duration_cast<std::chrono::milliseconds>(std::chrono::steady_clock::now() - started).count()
          << " ms");
  INFO(replay.describe());
  CHECK(replay.exit_code == 0);
  CHECK(replay.err.find("4 selected, 4 replayed: 4 resolved, 0 failed again") != std::string::npos);
  // The replay takes no result (it is its user's): no "output" that would read as empty.
  REQUIRE(replay.records.size() == 4);
  for (const json& r : replay.records) {
    CHECK(r["replay"] == "resolved");
    CHECK_FALSE(r.contains("output"));
    CHECK(r.value("output_omitted", "").find("its output went with its result to its reply_to, else crashes.results") ==
          0);
  }
  for (const auto& item : fleet.records("crashes")) {
    INFO(item.first);
    CHECK(item.second["status"] == "resolved");
  }
  // Results where their users look: the RPC's reply queue with its
  // correlation id and message id, the others NAME.results by key.
  const auto replies = drain(c, "replies");
  REQUIRE(replies.size() == 1);
  CHECK(replies[0].correlation_id == "req-9");
  CHECK(replies[0].body == "S rpc");
  CHECK(header_text(replies[0], "message_id") == "msg-rpc");
  std::map<std::string, std::string> output_of;
  for (const AmqpMessage& m : drain(c, "crashes.results")) output_of[header_text(m, "key")] = m.body;
  CHECK(output_of == std::map<std::string, std::string>{{"segv-1", "S 1"}, {"segv-2", "S 2"}, {"segv-3", "S 3"}});
  CHECK(fleet.quarantine("crashes", {"replay", "--all"}).err.find("4 matching records are resolved") !=
        std::string::npos);
  for (int id = 0; id < 4; ++id) CHECK_FALSE(exists(c, "crashes.dlq.lock." + std::to_string(id)));
  fixed.signal(SIGTERM);
  CHECK(fixed.wait() == 143);
}

// A record another connection holds is neither republished nor discarded;
// a replay SIGKILLed while it waits leaves no lock, its redrive is not
// repeated while no worker settled it, and the next replay records what it
// did once one has.
void locked_and_killed(const Fleet& fleet) {
  dead_letter(fleet, "held", {task("segv", "S held")});
  auto c = e2e::amqp_connect(fleet.server);
  // Its results stay where the workers put them: none for --out.
  e2e::TempDir out;
  const auto to_files = fleet.quarantine("held", {"replay", "0", "-o", out.path()});
  CHECK(to_files.exit_code == 2);
  CHECK(to_files.err.find("--out does not apply with --amqp") != std::string::npos);
  {
    auto other = e2e::amqp_connect(fleet.server);
    REQUIRE(other.declare_exclusive_queue("held.dlq.lock.0").is_ok());
    const auto taken = fleet.quarantine("held", {"replay", "0"});
    INFO(taken.describe());
    CHECK(taken.exit_code == 0);
    CHECK(taken.err.find("record 0 is being replayed right now by another replay") != std::string::npos);
    CHECK(taken.err.find("not redriven twice at once") != std::string::npos);
    const auto discard = fleet.quarantine("held", {"discard", "0", "--reason", "no"});
    CHECK(discard.exit_code == 2);
    CHECK(discard.err.find("is being replayed right now") != std::string::npos);
    CHECK(ready(c, "held") == 0);
  }  // its connection closed: the lock is gone with it

  e2e::Background first(e2e::pillbox_binary(), e2e::quarantine_args(fleet.server, "held",
                                                                      {"replay", "0", "--batch-timeout", "120s",
                                                                       "--fleet-key", fleet.key}));
  REQUIRE_MESSAGE(e2e::eventually([&] { return ready(c, "held") == 1; }), first.err());
  CHECK(exists(c, "held.dlq.lock.0"));
  CHECK(fleet.records("held").at("segv")["status"] == "replaying");
  first.signal(SIGKILL);
  first.wait();
  CHECK(e2e::eventually([&] { return !exists(c, "held.dlq.lock.0"); }));

  const auto again = fleet.quarantine("held", {"replay", "0", "--batch-timeout", "300ms"});
  INFO(again.describe());
  CHECK(again.err.find("record 0: its earlier redrive (attempt ") != std::string::npos);
  CHECK(again.err.find("has no outcome yet") != std::string::npos);
  CHECK(ready(c, "held") == 1);  // not republished

  const auto w = run_pillbox(fleet.worker("held", "fixed", true, {"--exit-when-idle", "1500ms", "--quiet"}));
  REQUIRE_MESSAGE(w.exit_code == 0, w.describe());
  const auto now = fleet.quarantine("held", {"replay", "0", "--batch-timeout", "60s"});
  INFO(now.describe());
  CHECK(now.exit_code == 0);
  CHECK(now.err.find("1 record had been redriven by an earlier replay that did not record how it ended") !=
        std::string::npos);
  CHECK(fleet.records("held").at("segv")["status"] == "resolved");
  CHECK(ready(c, "held") == 0);
  // One redrive, one result: of the original's message id and key (a
  // quorum queue counts every delivery, so the test never peeks at NAME).
  const auto results = drain(c, "held.results");
  REQUIRE(results.size() == 1);
  CHECK(header_text(results[0], "message_id") == "msg-segv");
  CHECK(header_text(results[0], "key") == "segv");
  CHECK(results[0].body == "S held");
}

// quarantine allow on RabbitMQ: an allowance signed with the fleet key,
// appended to NAME.dlq.state; replay --allowed republishes that record
// only. The attack: whoever may publish to NAME.dlq.state appends a state
// that says "allowed" (alone, or with the allowance of another record):
// never republished.
void allowed_only(const Fleet& fleet) {
  dead_letter(fleet, "review", {task("ok-1", "S 1"), task("forged", "S 2"), task("copied", "S 3")});
  auto by_key = fleet.records("review");
  const std::string allowed = by_key.at("ok-1")["id"].dump(), forged = by_key.at("forged")["id"].dump();
  const std::string copied = by_key.at("copied")["id"].dump();  // offsets: numbers
  const auto allow = fleet.quarantine("review", {"allow", allowed, "--note", "reviewed"});
  INFO(allow.describe());
  REQUIRE(allow.exit_code == 0);
  CHECK(allow.out == "record " + allowed + " allowed to replay (was quarantined)\n");
  const auto shown = fleet.quarantine("review", {"show", allowed, "--json"});
  REQUIRE(shown.records.size() == 1);
  CHECK(shown.records[0]["status"] == "allowed");
  CHECK(shown.records[0]["allowance"]["signature"] == "valid");

  // Forged states, appended as any publisher to the log can: the status
  // alone, and the allowed record's allowance on another record.
  auto c = e2e::amqp_connect(fleet.server);
  REQUIRE(c.confirm_publishes().is_ok());
  auto append = [&](const std::string& record, const std::string& state) {
    const std::string body = json{{"record", record}, {"version", 1}, {"state", state}}.dump();
    AmqpOutgoing m;
    m.body = body;
    REQUIRE(c.publish("review.dlq.state", m).is_ok());
    REQUIRE(c.wait_confirmed().is_ok());
  };
  append(forged, R"({"status":"allowed","updated_at":1,"audit":[]})");
  // A valid allowance, of the allowed record (its id, its payload): signed
  // with the fleet's own key, as the allowed record's state holds it.
  pillbox::broker::FleetRecord of_allowed;
  of_allowed.id = allowed;
  of_allowed.record.entry.payload_sha256 = pillbox::sha256_hex("S 1");
  const pillbox::broker::FleetKey key(e2e::read_file(fleet.key));
  const auto valid = pillbox::broker::make_allowance(&key, "review.dlq", of_allowed, "alice", 1);
  json stolen = {{"status", "allowed"}, {"updated_at", 1}, {"audit", json::array()},
                 {"allowance", {{"at", valid.at}, {"actor", valid.actor}, {"sig", valid.sig}}}};
  append(copied, stolen.dump());
  CHECK(e2e::eventually([&] { return fleet.records("review").at("copied")["status"] == "allowed"; }));
  CHECK(fleet.quarantine("review", {"show", forged, "--json"}).records[0]["allowance"]["signature"] == "missing");
  CHECK(fleet.quarantine("review", {"show", copied, "--json"}).records[0]["allowance"]["signature"] == "bad");

  {
    e2e::Background fixed(e2e::pillbox_binary(), fleet.worker("review", "fixed", true));
    const auto replay = fleet.quarantine("review", {"replay", "--allowed", "--batch-timeout", "60s"});
    INFO(replay.describe());
    CHECK(replay.exit_code == 0);
    CHECK(replay.err.find("2 matching records (") != std::string::npos);
    CHECK(replay.err.find("have no valid allowance") != std::string::npos);
    CHECK(replay.err.find("1 selected, 1 replayed: 1 resolved") != std::string::npos);
    fixed.signal(SIGTERM);
    CHECK(fixed.wait() == 143);
  }
  by_key = fleet.records("review");
  CHECK(by_key.at("ok-1")["status"] == "resolved");
  CHECK(by_key.at("forged")["status"] == "allowed");  // never republished
  CHECK(by_key.at("copied")["status"] == "allowed");
  CHECK(drain(c, "review.results").size() == 1);
  // Refused with why while nothing holds it; revoked back to review.
  const auto resolved = fleet.quarantine("review", {"allow", allowed});
  CHECK(resolved.exit_code == 2);
  CHECK(resolved.err.find("record " + allowed + " is resolved") != std::string::npos);
  CHECK(fleet.quarantine("review", {"allow", "--revoke", forged}).exit_code == 0);
  CHECK(fleet.records("review").at("forged")["status"] == "quarantined");
}

}  // namespace

TEST_CASE("quarantine replay --amqp: batches that stop themselves, results where users look, one redrive at once") {
  e2e::RabbitServer server;
  REQUIRE_RABBITMQ(server);
  e2e::TempDir keys(0700);
  const std::string key = e2e::fleet_key_file(keys);
  const Fleet fleet{server, key};
  stops_then_resolves(fleet);
  locked_and_killed(fleet);
  allowed_only(fleet);
}
