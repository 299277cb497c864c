// pillbox quarantine patch on the fleet's quarantine (fleet_revisions.h),
// the same scenarios on a real redis-server (--redis URL --stream NAME) and
// a real rabbitmq-server (--amqp URL --queue NAME), each started by the
// test, with real `pillbox worker` processes running the mixed_poison
// fixture (S: SIGSEGV, else echo): a patch is stored as the record's next
// revision, refused as the store refuses one, listed by show and exported
// by --revision; an allowed record goes back to review; replay redrives the
// newest revision (the worker's result echoes the patched bytes) and
// resolves a record whose original crashed; a revision forged by whoever
// can write to the broker (unsigned, another sha256, another record's,
// bytes swapped) never runs; two patches at once keep both or refuse one,
// never lose one silently; a patch SIGKILLed at any moment leaves state and
// kept bytes that agree (bytes no state names are ignored).
#include <doctest/doctest.h>
#include <signal.h>

#include <chrono>
#include <functional>
#include <map>
#include <memory>
#include <nlohmann/json.hpp>
#include <random>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "shared/sha256.h"
#include "supervisor/broker/fleet_state.h"
#include "tests/e2e/background.h"
#include "tests/e2e/fleet_patch_fleet.h"
#include "tests/e2e/rabbit_server.h"
#include "tests/e2e/redis_server.h"
#include "tests/e2e/support.h"

namespace {

using e2e::fleet_patch::amqp_fleet;
using e2e::fleet_patch::Fleet;
using e2e::fleet_patch::has;
using e2e::fleet_patch::json;
using e2e::fleet_patch::kNoKey;
using e2e::fleet_patch::payload_file;
using e2e::fleet_patch::redis_fleet;
using e2e::fleet_patch::Tasks;
using pillbox::broker::FleetRevision;
using pillbox::broker::FleetState;

// ---- the scenarios, once for both ---------------------------------------

// Patch, its refusals, show, export --revision, an allowed record back to review.
void patches_and_shows(const Fleet& fleet) {
  fleet.dead_letter({{"fixme", "S 1"}, {"done", "S 2"}, {"allowed", "S 3"}});
  const std::string fixme = fleet.id("fixme"), done = fleet.id("done"), allowed = fleet.id("allowed");
  e2e::TempDir dir;
  const std::string fixed = payload_file(dir, "ok 1");

  // Refused, each with why, changing nothing.
  auto r = fleet.quarantine({"patch", fixme, "--payload-file", payload_file(dir, "S 1"), "--note", "same"});
  CHECK(r.exit_code == 2);
  CHECK_MESSAGE(has(r.err, "the new payload is the same as the original of record " + fixme), r.err);
  r = fleet.quarantine({"patch", fixme, "--payload-file", fixed});
  CHECK(r.exit_code == 2);
  CHECK_MESSAGE(has(r.err, "patch needs --note TEXT"), r.err);
  r = fleet.quarantine({"patch", fixme, "--set-arg", "mode=lenient", "--note", "args"});
  CHECK(r.exit_code == 2);
  CHECK_MESSAGE(has(r.err, "--set-arg does not apply on the fleet's quarantine: its tasks carry no handler arguments "
                           "(the workers' own --arg decides them)"),
                r.err);
  REQUIRE(fleet.quarantine({"discard", done, "--reason", "not ours"}).exit_code == 0);
  r = fleet.quarantine({"patch", done, "--payload-file", fixed, "--note", "late"});
  CHECK(r.exit_code == 2);
  CHECK_MESSAGE(has(r.err, "record " + done + " is discarded: only an open record"), r.err);
  CHECK(fleet.show(fixme)["revisions"] == json::array());

  // Stored: the bytes apart, the state naming them.
  const auto started = std::chrono::steady_clock::now();
  r = fleet.quarantine({"patch", fixme, "--payload-file", fixed, "--note", "the header fixed by hand", "--json"});
  const auto took = std::chrono::steady_clock::now() - started;
  MESSAGE(fleet.broker << ": a patch took " << std::chrono::duration_cast<std::chrono::milliseconds>(took).count()
                       << " ms (the process, its connection, the record read, the bytes kept, the state's compare "
                          "and set)");
  REQUIRE_MESSAGE(r.exit_code == 0, r.describe());
  const json patched = json::parse(r.out);
  CHECK(patched["n"] == 1);
  CHECK(patched["record_id"] == fleet.show(fixme)["id"]);
  CHECK(patched["payload_sha256"] == pillbox::sha256_hex("ok 1"));
  CHECK(patched["payload_size"] == 4);
  CHECK(patched["summary"] == "payload 3 -> 4 bytes, bytes 0-1 replaced by 2 bytes");
  r = fleet.quarantine({"patch", fixme, "--payload-file", fixed, "--note", "again"});
  CHECK(r.exit_code == 2);
  CHECK_MESSAGE(has(r.err, "the new payload is the same as revision 1 of record " + fixme), r.err);

  const json shown = fleet.show(fixme);
  REQUIRE(shown["revisions"].size() == 1);
  const json& v = shown["revisions"][0];
  CHECK(v["n"] == 1);
  CHECK(v["note"] == "the header fixed by hand");
  CHECK(v["payload_size"] == 4);
  CHECK(v["signature"] == "valid");
  CHECK(shown["audit"].back()["action"] == "patched");
  CHECK(has(shown["audit"].back()["detail"].get<std::string>(), "revision 1 (from the original): payload 3 -> 4"));
  const auto text = fleet.quarantine({"show", fixme});
  CHECK_MESSAGE(has(text.out, "revisions (1, replay runs revision 1; the original above is unchanged):"), text.out);
  CHECK(fleet.quarantine({"export", fixme, "--revision", "1", "-o", "-"}).out == "ok 1");
  CHECK(fleet.quarantine({"export", fixme, "-o", "-"}).out == "S 1");  // the original, unchanged
  r = fleet.quarantine({"export", fixme, "--revision", "2", "-o", "-"});
  CHECK(r.exit_code == 2);
  CHECK_MESSAGE(has(r.err, "record " + fixme + " has no revision 2"), r.err);

  // What a replay would run now nobody reviewed: back to quarantined.
  REQUIRE(fleet.quarantine({"allow", allowed, "--note", "read it"}).exit_code == 0);
  r = fleet.quarantine({"patch", allowed, "--payload-file", fixed, "--note", "after review"});
  REQUIRE_MESSAGE(r.exit_code == 0, r.describe());
  CHECK_MESSAGE(has(r.out, "record " + allowed + " was allowed to replay: it awaits review again"), r.out);
  const json back = fleet.show(allowed);
  CHECK(back["status"] == "quarantined");
  CHECK_FALSE(back.contains("allowance"));
  CHECK(back["audit"].back()["action"] == "allowance revoked");
}

// Replay redrives the newest revision; the result says which ran.
void replays_the_patch(const Fleet& fleet) {
  fleet.dead_letter({{"fixme", "S 1"}, {"broken", "S 2"}});
  const std::string fixme = fleet.id("fixme"), broken = fleet.id("broken");
  e2e::TempDir dir;
  REQUIRE(fleet.quarantine({"patch", fixme, "--payload-file", payload_file(dir, "S still"), "--note", "first try"})
              .exit_code == 0);
  REQUIRE(fleet.quarantine({"patch", fixme, "--payload-file", payload_file(dir, "ok 1"), "--note", "second try"})
              .exit_code == 0);
  const auto plan = fleet.quarantine({"replay", "--all", "--dry-run", "--json"});
  REQUIRE_MESSAGE(plan.exit_code == 0, plan.describe());
  const json planned = json::parse(plan.out);
  REQUIRE(planned["records"].size() == 2);
  for (const json& p : planned["records"]) CHECK(p.value("revision", 0) == (p["key"] == "fixme" ? 2 : 0));

  // The workers are as broken as ever: only what the patch changed runs ok.
  e2e::Background worker(e2e::pillbox_binary(), fleet.worker());
  const auto replay = fleet.quarantine({"replay", "--all", "--json", "--batch-timeout", "60s"});
  INFO(replay.describe());
  CHECK(replay.exit_code == 1);  // the unpatched one failed again
  CHECK(has(replay.err, "2 selected, 2 replayed: 1 resolved, 1 failed again"));
  std::map<std::string, json> by_key;
  for (const json& j : replay.records) by_key[j.value("key", "")] = j;
  REQUIRE(by_key.count("fixme") == 1);
  CHECK(by_key["fixme"]["replay"] == "resolved");
  CHECK(by_key["fixme"]["revision"] == 2);
  CHECK(by_key["broken"]["replay"] == "failed-again");
  CHECK_FALSE(by_key["broken"].contains("revision"));
  worker.signal(SIGTERM);
  CHECK(worker.wait() == 143);

  // How the test knows the new bytes ran: the worker echoes its payload,
  // and the one result of key fixme is revision 2's bytes.
  const auto outputs = fleet.outputs();
  CHECK(outputs.count("fixme") == 1);
  CHECK(outputs.find("fixme")->second == "ok 1");
  CHECK(outputs.count("broken") == 0);
  const json shown = fleet.show(fixme);
  CHECK(shown["status"] == "resolved");
  CHECK(has(shown["audit"].back()["detail"].get<std::string>(),
            ", from revision 2 (a patch; the original is unchanged)"));
  CHECK(has(shown["attempt_history"].back()["message"].get<std::string>(), " (revision 2, a patch)"));
  CHECK(fleet.show(broken)["status"] == "failed-again");
  // Resolved: patched no more.
  const auto late = fleet.quarantine({"patch", fixme, "--payload-file", payload_file(dir, "ok 2"), "--note", "late"});
  CHECK(late.exit_code == 2);
  CHECK(has(late.err, "is resolved: only an open record"));
}

// What someone with write access to the broker can forge never runs.
void forged_revisions_never_run(const Fleet& fleet) {
  fleet.dead_letter(
      {{"unsigned", "S 1"}, {"resigned", "S 2"}, {"copied", "S 3"}, {"swapped", "S 4"}, {"orphan", "S 5"}});
  const std::string unsigned_id = fleet.id("unsigned"), resigned = fleet.id("resigned"), copied = fleet.id("copied");
  const std::string swapped = fleet.id("swapped"), orphan = fleet.id("orphan");
  e2e::TempDir dir;
  // Echoed if it ever ran: found in the outputs. As long as the bytes it
  // replaces (swapped, below), so that only their sha256 tells them apart.
  const std::string evil = "pwnd";

  // Patched by an operator without the fleet's key: unsigned.
  auto r = fleet.quarantine({"patch", unsigned_id, "--payload-file", payload_file(dir, "ok u"), "--note", "no key"},
                            kNoKey);
  REQUIRE_MESSAGE(r.exit_code == 0, r.describe());
  CHECK(fleet.show(unsigned_id)["revisions"][0]["signature"] == "missing");
  // A valid revision whose state then names other bytes kept beside it (another sha256).
  REQUIRE(fleet.quarantine({"patch", resigned, "--payload-file", payload_file(dir, "ok r"), "--note", "n"}).exit_code ==
          0);
  const std::int64_t evil_at = fleet.keep_bytes(resigned, evil);
  fleet.forge_state(resigned, [&](FleetState& s) {
    s.revisions.back().payload_sha256 = pillbox::sha256_hex(evil);
    s.revisions.back().payload_size = static_cast<std::int64_t>(evil.size());
    s.revisions.back().at = evil_at;
  });
  // Another record's valid revision copied onto this one, its bytes kept for it.
  FleetRevision theirs;
  fleet.forge_state(resigned, [&](FleetState& s) { theirs = s.revisions.back(); });
  REQUIRE(fleet.quarantine({"patch", swapped, "--payload-file", payload_file(dir, "ok s"), "--note", "n"}).exit_code ==
          0);
  FleetRevision swapped_revision;
  fleet.forge_state(swapped, [&](FleetState& s) { swapped_revision = s.revisions.back(); });
  const std::int64_t copied_at = fleet.keep_bytes(copied, "ok s");
  fleet.forge_state(copied, [&](FleetState& s) {
    s.revisions.push_back(swapped_revision);
    s.revisions.back().at = copied_at;
  });
  // A valid revision whose bytes are replaced where the broker keeps them.
  fleet.swap_bytes(swapped, swapped_revision, evil);
  // Bytes kept that no state names (a patch SIGKILLed between the two).
  fleet.keep_bytes(orphan, "ok o");

  const auto plan = fleet.quarantine({"replay", unsigned_id, resigned, copied, "--dry-run"});
  INFO(plan.describe());
  CHECK(has(plan.out, "would replay 0 records"));
  CHECK(has(plan.out, "skipped: record " + unsigned_id + "'s revision 1 is unsigned"));
  CHECK(has(plan.out, "skipped: record " + resigned + "'s revision 1 does not match the fleet key"));
  CHECK(has(plan.out, "skipped: record " + copied + "'s revision 1 does not match the fleet key"));
  CHECK(fleet.show(orphan)["revisions"] == json::array());
  const auto damaged = fleet.quarantine({"export", swapped, "--revision", "1", "-o", "-"});
  CHECK(damaged.exit_code == 3);
  CHECK_MESSAGE(has(damaged.err, "revision 1 of record " + swapped + " cannot be read: "), damaged.err);
  CHECK(damaged.out.empty());

  e2e::Background worker(e2e::pillbox_binary(), fleet.worker());
  const auto replay = fleet.quarantine({"replay", "--all", "--json", "--batch-timeout", "60s"});
  INFO(replay.describe());
  CHECK(replay.exit_code == 1);  // the orphan's record ran its original, which crashes again
  CHECK(has(replay.err, "3 matching records ("));
  CHECK(has(replay.err, "have a newest revision with no valid signature"));
  CHECK(has(replay.err, "record " + swapped + "'s revision 1 cannot be replayed: "));
  CHECK(has(replay.err, "does not match the sha256 its state names"));
  REQUIRE(replay.records.size() == 1);
  CHECK(replay.records[0]["key"] == "orphan");
  CHECK(replay.records[0]["replay"] == "failed-again");
  worker.signal(SIGTERM);
  CHECK(worker.wait() == 143);
  for (const auto& [key, output] : fleet.outputs()) CHECK_MESSAGE(output != evil, key);
  const auto after = fleet.records();
  for (const std::string key : {"unsigned", "resigned", "copied", "swapped"}) {
    INFO(key);
    CHECK(after.at(key)["status"] == "quarantined");  // never redriven
  }
  // What to do, said: the operator with the key patches again, and it runs.
  r = fleet.quarantine({"patch", unsigned_id, "--payload-file", payload_file(dir, "ok u2"), "--note", "with the key"});
  REQUIRE_MESSAGE(r.exit_code == 0, r.describe());
  CHECK(fleet.show(unsigned_id)["revisions"][1]["signature"] == "valid");
}

// Two patches at once; patches SIGKILLed at random moments.
void races_and_kills(const Fleet& fleet) {
  fleet.dead_letter({{"race", "S 1"}, {"killed", "S 2"}});
  const std::string race = fleet.id("race"), killed = fleet.id("killed");
  e2e::TempDir dir;
  // pillbox's own argument list for a background patch, from the worker's (URL, name, key).
  std::vector<std::string> target;
  {
    const auto w = fleet.worker();
    for (std::size_t i = 1; i + 1 < w.size() && w[i] != "--"; ++i) {
      if (w[i] == "--redis" || w[i] == "--stream" || w[i] == "--amqp" || w[i] == "--queue" || w[i] == "--fleet-key") {
        target.insert(target.end(), {w[i], w[i + 1]});
      }
    }
  }
  auto background_patch = [&](const std::string& id, const std::string& bytes) {
    std::vector<std::string> args = {"quarantine", "patch", id, "--payload-file", payload_file(dir, bytes),
                                     "--note", "at once", "--json"};
    args.insert(args.end(), target.begin(), target.end());
    return std::make_unique<e2e::Background>(e2e::pillbox_binary(), args);
  };

  // Both kept in order, or one refused and said so: never one lost silently.
  auto a = background_patch(race, "ok a");
  auto b = background_patch(race, "ok b");
  const int a_exit = a->wait(), b_exit = b->wait();
  INFO("a: " << a_exit << " " << a->out() << a->err());
  INFO("b: " << b_exit << " " << b->out() << b->err());
  std::vector<std::string> stored;
  for (const auto* p : {a.get(), b.get()}) {
    const int code = p == a.get() ? a_exit : b_exit;
    if (code == 0) {
      stored.push_back(json::parse(p->out())["payload_sha256"].get<std::string>());
    } else {
      CHECK(code == 2);
      CHECK(has(p->err(), "record " + race + " was patched meanwhile"));
    }
  }
  REQUIRE_FALSE(stored.empty());
  const json raced = fleet.show(race);
  REQUIRE(raced["revisions"].size() == stored.size());
  for (std::size_t i = 0; i < stored.size(); ++i) {
    CHECK(raced["revisions"][i]["n"] == i + 1);
    CHECK(std::find(stored.begin(), stored.end(), raced["revisions"][i]["payload_sha256"]) != stored.end());
  }
  MESSAGE(fleet.broker << ": two patches at once: " << stored.size() << " kept, " << 2 - stored.size() << " refused");

  // SIGKILLed at a random moment: the state and the kept bytes agree.
  std::mt19937 random(std::random_device{}());
  // About a patch's time (measured above), its process start included.
  const int most_ms = fleet.broker == "amqp" ? 2200 : 20;
  int before = 0, after = 0, between = 0;
  for (int round = 0; round < 8; ++round) {
    const long long kept_before = fleet.kept_count(killed);
    const auto named_before = static_cast<long long>(fleet.show(killed)["revisions"].size());
    auto p = background_patch(killed, "ok k" + std::to_string(round));
    std::this_thread::sleep_for(std::chrono::milliseconds(random() % most_ms));  // a random moment, not a wait
    p->signal(SIGKILL);
    const int code = p->wait();
    (code == 0 ? after : before) += 1;
    const json shown = fleet.show(killed);
    const json& revisions = shown["revisions"];
    // Killed between its two writes: bytes kept that no revision names.
    if (fleet.kept_count(killed) - kept_before >
                                static_cast<long long>(revisions.size()) - named_before) {
      ++between;
    }
    for (std::size_t i = 0; i < revisions.size(); ++i) {
      INFO("round " << round << ", revision " << i + 1);
      CHECK(revisions[i]["n"] == i + 1);
      const auto bytes = fleet.quarantine({"export", killed, "--revision", std::to_string(i + 1), "-o", "-"});
      CHECK_MESSAGE(bytes.exit_code == 0, bytes.describe());
      CHECK(pillbox::sha256_hex(bytes.out) == revisions[i]["payload_sha256"]);
    }
  }
  MESSAGE(fleet.broker << ": 8 patches SIGKILLed: " << before << " before they ended, " << after
                       << " after; killed between keeping the bytes and naming them in the state: " << between);
  const json last = fleet.show(killed);
  if (!last["revisions"].empty()) {
    e2e::Background worker(e2e::pillbox_binary(), fleet.worker());
    const auto replay = fleet.quarantine({"replay", killed, "--batch-timeout", "60s"});
    CHECK_MESSAGE(replay.exit_code == 0, replay.describe());
    worker.signal(SIGTERM);
    CHECK(worker.wait() == 143);
    const auto bytes = fleet.quarantine(
        {"export", killed, "--revision", std::to_string(last["revisions"].size()), "-o", "-"});
    CHECK(fleet.outputs().find("killed")->second == bytes.out);
  }
}

}  // namespace

TEST_CASE("quarantine patch --redis: stored, shown, replayed; forgeries never run; races and kills lose nothing") {
  e2e::RedisServer server;  // its processes get PILLBOX_FLEET_KEY: workers sign, patch signs
  REQUIRE_REDIS(server);
  patches_and_shows(redis_fleet(server, "shown"));
  replays_the_patch(redis_fleet(server, "replayed"));
  forged_revisions_never_run(redis_fleet(server, "forged"));
  races_and_kills(redis_fleet(server, "raced"));
}

TEST_CASE("quarantine patch --amqp: stored, shown, replayed; forgeries never run; races and kills lose nothing") {
  e2e::RabbitServer server;
  REQUIRE_RABBITMQ(server);
  e2e::TempDir keys(0700);
  const std::string key = e2e::fleet_key_file(keys);
  patches_and_shows(amqp_fleet(server, key, "shown"));
  replays_the_patch(amqp_fleet(server, key, "replayed"));
  forged_revisions_never_run(amqp_fleet(server, key, "forged"));
  races_and_kills(amqp_fleet(server, key, "raced"));
}
