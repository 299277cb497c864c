// quarantine patch on the fleet attacked by whoever can write to the broker
// (the fleet key's holder is the operator), on a real redis-server and a
// real rabbitmq-server the test starts, with real `pillbox worker`
// processes running the mixed_poison fixture (S: SIGSEGV, else echo: what
// ran is found in the results): a signature moved onto another revision or
// number, an older signed revision copied to the end of the state, an
// unsigned one added by hand, another record's revision pointed at, bytes
// kept beside the named ones never run; a state of 10 000 odd revisions
// (sizes, offsets, numbers, sha256s no patch writes) is read in bounded
// time with clear errors; escape sequences in a note or author never reach
// the terminal. fleet_patch_test.cpp has the forgeries of one revision.
#include <doctest/doctest.h>
#include <signal.h>

#include <cstdint>
#include <limits>
#include <nlohmann/json.hpp>
#include <string>
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
using e2e::fleet_patch::payload_file;
using e2e::fleet_patch::redis_fleet;
using pillbox::broker::FleetRevision;
using pillbox::broker::FleetState;

// Echoed by the worker if it ever ran.
const std::string kEvil = "pwnd";

void patch(const Fleet& fleet, const e2e::TempDir& dir, const std::string& id, const std::string& bytes) {
  const auto r = fleet.quarantine({"patch", id, "--payload-file", payload_file(dir, bytes), "--note", "by the key"});
  REQUIRE_MESSAGE(r.exit_code == 0, r.describe());
}

// Signatures moved, revisions added, copied and pointed elsewhere: never run.
void forged_lists_never_run(const Fleet& fleet) {
  fleet.dead_letter({{"moved", "S 1"}, {"rollback", "S 2"}, {"added", "S 3"}, {"pointed", "S 4"}, {"extra", "S 5"},
                     {"other", "S 6"}});
  const std::string moved = fleet.id("moved"), rollback = fleet.id("rollback"), added = fleet.id("added");
  const std::string pointed = fleet.id("pointed"), extra = fleet.id("extra"), other = fleet.id("other");
  e2e::TempDir dir;

  // Revision 1's signature copied onto revision 2 (its number and bytes differ).
  patch(fleet, dir, moved, "ok m1");
  patch(fleet, dir, moved, "ok m2");
  fleet.forge_state(moved, [](FleetState& s) { s.revisions[1].sig = s.revisions[0].sig; });
  CHECK(fleet.show(moved)["revisions"][1]["signature"] == "bad");
  // An older signed revision copied to the end: every field as signed, so
  // that replay would run revision 1 again (a rollback the operator never did).
  patch(fleet, dir, rollback, "ok r1");
  patch(fleet, dir, rollback, "ok r2");
  fleet.forge_state(rollback, [](FleetState& s) { s.revisions.push_back(s.revisions[0]); });
  CHECK(fleet.show(rollback)["revisions"][2]["signature"] == "valid");
  // An unsigned revision added by hand on top of a signed one, its bytes kept.
  patch(fleet, dir, added, "ok a1");
  const std::int64_t evil_at = fleet.keep_bytes(added, kEvil);
  fleet.forge_state(added, [&](FleetState& s) {
    FleetRevision v = s.revisions[0];
    v.n = 2;
    v.payload_sha256 = pillbox::sha256_hex(kEvil);
    v.payload_size = static_cast<std::int64_t>(kEvil.size());
    v.at = evil_at;
    v.sig.clear();
    s.revisions.push_back(v);
  });
  // Another record's signed revision named as this one's (RabbitMQ: its offset).
  patch(fleet, dir, other, kEvil);
  FleetRevision theirs;
  fleet.forge_state(other, [&](FleetState& s) { theirs = s.revisions[0]; });
  fleet.forge_state(pointed, [&](FleetState& s) { s.revisions.push_back(theirs); });
  // Bytes kept for the record beside its signed revision's (RabbitMQ: a
  // later message of NAME.dlq.revisions claiming the record), named by nothing.
  patch(fleet, dir, extra, "ok e1");
  fleet.keep_bytes(extra, kEvil);
  REQUIRE(fleet.quarantine({"discard", other, "--reason", "only its revision is used"}).exit_code == 0);

  const auto plan = fleet.quarantine({"replay", moved, rollback, added, pointed, "--dry-run"});
  INFO(plan.describe());
  CHECK(plan.exit_code == 0);
  CHECK(has(plan.out, "would replay 0 records"));
  CHECK(has(plan.out, "skipped: record " + moved + "'s revision 2 does not match the fleet key"));
  CHECK(has(plan.out, "skipped: record " + rollback + "'s newest revision (the last of 3) is numbered 1, not above "
                      "revision 2 before it"));
  CHECK(has(plan.out, "skipped: record " + added + "'s revision 2 is unsigned"));
  CHECK(has(plan.out, "skipped: record " + pointed + "'s revision 1 does not match the fleet key"));
  // Trusting unsigned revisions does not make a copied one the newest.
  const auto trusting = fleet.quarantine({"replay", rollback, "--dry-run", "--trust-unsigned"});
  CHECK(has(trusting.out, "would replay 0 records"));
  CHECK_MESSAGE(has(trusting.out, "is numbered 1, not above revision 2 before it"), trusting.describe());

  e2e::Background worker(e2e::pillbox_binary(), fleet.worker());
  const auto replay = fleet.quarantine({"replay", "--all", "--json", "--batch-timeout", "60s"});
  INFO(replay.describe());
  REQUIRE(replay.records.size() == 1);
  CHECK(replay.records[0]["key"] == "extra");
  CHECK(replay.records[0]["replay"] == "resolved");
  CHECK(replay.records[0]["revision"] == 1);
  // With the key's check waived, another record's bytes are still not this one's.
  const auto waived = fleet.quarantine({"replay", pointed, "--trust-unsigned", "--batch-timeout", "60s"});
  CHECK_MESSAGE(has(waived.out + waived.err, "record " + pointed + "'s revision 1 cannot be replayed: "),
                waived.describe());
  worker.signal(SIGTERM);
  CHECK(worker.wait() == 143);

  const auto outputs = fleet.outputs();
  for (const auto& kv : outputs) CHECK_MESSAGE(kv.second != kEvil, kv.first);
  CHECK(outputs.count("extra") == 1);
  CHECK(outputs.find("extra")->second == "ok e1");
  const auto after = fleet.records();
  for (const std::string k : {"moved", "rollback", "added", "pointed"}) {
    INFO(k);
    CHECK(after.at(k)["status"] == "quarantined");
  }
  // What the operator is told to do works: patched again, numbered above all, and run.
  patch(fleet, dir, rollback, "ok r3");
  const json shown = fleet.show(rollback);
  REQUIRE(shown["revisions"].size() == 4);
  CHECK(shown["revisions"][3]["n"] == 4);  // above the count of those before it and their numbers
  CHECK(shown["revisions"][3]["signature"] == "valid");
  const auto again = fleet.quarantine({"replay", rollback, "--dry-run", "--json"});
  REQUIRE_MESSAGE(again.exit_code == 0, again.describe());
  CHECK(json::parse(again.out)["records"][0]["revision"] == 4);
}

// Sizes, offsets, numbers and sha256s no patch writes: 10 000 of them on
// Redis (a state there may be 4 MiB), 4 000 on RabbitMQ (1 MiB).
void odd_states_are_bounded(const Fleet& fleet) {
  const int count = fleet.broker == "redis" ? 10000 : 4000;
  fleet.dead_letter({{"odd", "S 1"}, {"big", "S 2"}, {"escapes", "S 3"}});
  const std::string odd = fleet.id("odd"), big = fleet.id("big"), escapes = fleet.id("escapes");
  e2e::TempDir dir;
  patch(fleet, dir, odd, "ok o1");
  constexpr std::int64_t kMost = std::numeric_limits<std::int64_t>::max();
  fleet.forge_state(odd, [&](FleetState& s) {
    const FleetRevision signed_one = s.revisions[0];
    s.revisions.clear();
    for (int i = 0; i < count; ++i) {
      FleetRevision v;
      const int k = i % 4;
      v.n = k == 0 ? i + 1 : k == 1 ? -5 : k == 2 ? kMost : 0;
      v.payload_size = k == 0 ? -1 : k == 1 ? kMost : k == 2 ? std::int64_t{1} << 40 : 0;
      v.payload_sha256 = k == 0 ? "zz\x1b[0m" : k == 1 ? std::string(64, 'g') : k == 2 ? signed_one.payload_sha256 : "";
      v.at = k == 0 ? -7 : k == 1 ? kMost : k == 2 ? 5 : -1;
      v.created_at = k == 0 ? kMost : k == 1 ? std::numeric_limits<std::int64_t>::min() : 0;
      s.revisions.push_back(v);
    }
    s.revisions.push_back(signed_one);  // numbered 1, below the others: never run
  });
  const std::vector<std::vector<std::string>> verbs = {
      {"show", odd}, {"show", odd, "--json"}, {"list"}, {"list", "--json"}, {"replay", odd, "--dry-run"},
      {"replay", odd, "--dry-run", "--trust-unsigned"}, {"export", odd, "--revision", "1", "-o", "-"},
      {"export", odd, "--revision", "9223372036854775807", "-o", "-"}, {"export", odd, "--revision", "-5", "-o", "-"}};
  for (const auto& verb : verbs) {
    const auto r = fleet.quarantine(verb);
    INFO(verb[0] << " " << (verb.size() > 2 ? verb[2] : "") << ": " << r.describe());
    CHECK(r.term_signal == 0);
    CHECK(r.exit_code >= 0);
    CHECK(r.exit_code <= 3);
    CHECK(r.seconds < 20);
    MESSAGE(fleet.broker << ": quarantine " << verb[0] << " of " << count + 1 << " revisions: " << r.seconds << " s, exit "
                         << r.exit_code);
  }
  const auto plan = fleet.quarantine({"replay", odd, "--dry-run", "--trust-unsigned"});
  CHECK_MESSAGE(has(plan.out, "is numbered 1, not above revision 9223372036854775807 before it"),
                plan.describe());
  // A state whose numbers reach the int64 limit: a patch refuses, said why.
  const auto full = fleet.quarantine({"patch", odd, "--payload-file", payload_file(dir, "ok o2"), "--note", "n"});
  CHECK(full.exit_code == 2);
  CHECK_MESSAGE(has(full.err, "state numbers a revision at the int64 limit"), full.describe());
  // A revision's sha256 naming bytes of the right content but more of them
  // than its state says: no more than that size is read, and it is refused.
  patch(fleet, dir, big, "ok b1");
  const std::string large(4 << 20, 'x');
  const std::int64_t large_at = fleet.keep_bytes(big, large);
  fleet.forge_state(big, [&](FleetState& s) {
    s.revisions[0].payload_sha256 = pillbox::sha256_hex(large);
    s.revisions[0].payload_size = 5;
    s.revisions[0].at = large_at;
  });
  const auto r = fleet.quarantine({"export", big, "--revision", "1", "-o", "-"});
  CHECK(r.exit_code == 3);
  CHECK(r.out.empty());
  CHECK_MESSAGE(has(r.err, "revision 1 of record " + big + " cannot be read: "), r.describe());
  CHECK_MESSAGE((has(r.err, "bytes, not the 5 its state names") || has(r.err, "more than the size its state names")),
                r.describe());

  // Escape sequences and line breaks in a revision's note and author.
  patch(fleet, dir, escapes, "ok x1");
  const std::string note = "fine\x1b[2J\x1b]0;owned\x07\n  #9 2026-01-01  forged line", actor = "op\x1b[31m\r\nroot";
  fleet.forge_state(escapes, [&](FleetState& s) {
    s.revisions[0].note = note;
    s.revisions[0].actor = actor;
  });
  const auto text = fleet.quarantine({"show", escapes});
  REQUIRE_MESSAGE(text.exit_code == 0, text.describe());
  CHECK(text.out.find('\x1b') == std::string::npos);
  CHECK(text.out.find('\x07') == std::string::npos);
  CHECK(text.out.find('\r') == std::string::npos);
  CHECK_FALSE(has(text.out, "\n  #9 2026-01-01"));
  const json shown = fleet.show(escapes);  // the JSON keeps them, escaped
  CHECK(shown["revisions"][0]["note"] == note);
  CHECK(shown["revisions"][0]["actor"] == actor);
  CHECK(shown["revisions"][0]["signature"] == "bad");  // the author is signed
}

}  // namespace

TEST_CASE("quarantine patch --redis attacked: forged revision lists never run; odd states are bounded") {
  e2e::RedisServer server;  // its processes get PILLBOX_FLEET_KEY
  REQUIRE_REDIS(server);
  forged_lists_never_run(redis_fleet(server, "forged"));
  odd_states_are_bounded(redis_fleet(server, "odd"));
}

TEST_CASE("quarantine patch --amqp attacked: forged revision lists never run; odd states are bounded") {
  e2e::RabbitServer server;
  REQUIRE_RABBITMQ(server);
  e2e::TempDir keys(0700);
  const std::string key = e2e::fleet_key_file(keys);
  forged_lists_never_run(amqp_fleet(server, key, "forged"));
  odd_states_are_bounded(amqp_fleet(server, key, "odd"));
}
