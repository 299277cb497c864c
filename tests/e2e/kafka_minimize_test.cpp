// pillbox minimize --kafka and quarantine patch --kafka against
// librdkafka's mock cluster (kafka_mock.h): the payloads kept apart from the
// dead letters go to the one-partition topics T.dlq.minimized and
// T.dlq.revisions (supervisor/broker/kafka_payload_log.h), which pillbox
// does not create (an error says how, and nothing is made by naming them).
// A record minimized shrinks to the poison plugin's trigger, its progress
// and result in T.dlq.state; show and export --minimized have it. A record
// patched keeps its revision in T.dlq.revisions, signed; replay republishes
// the revision's bytes under the record's key, a worker runs them, and the
// record resolves. Forged states and payload entries (another record's, other
// bytes, too large, a null value, past the end) are checked, never taken.
#include <doctest/doctest.h>
#include <signal.h>

#include <functional>
#include <map>
#include <nlohmann/json.hpp>
#include <random>
#include <string>
#include <vector>

#include "shared/sha256.h"
#include "supervisor/broker/fleet_state_log.h"
#include "supervisor/broker/kafka_payload_log.h"
#include "supervisor/broker/kafka_state_log.h"
#include "tests/e2e/amqp_client.h"
#include "tests/e2e/background.h"
#include "tests/e2e/kafka_client.h"
#include "tests/e2e/kafka_mock.h"
#include "tests/e2e/kafka_quarantine_cli.h"
#include "tests/e2e/support.h"

using json = nlohmann::json;

namespace {

const std::string kTopic = "tasks";
constexpr std::string_view kToken = "P0ISONED";  // the poison plugin crashes on it anywhere

std::vector<std::string> with_kafka(std::vector<std::string> args, const e2e::KafkaMock& mock, const std::string& key) {
  return e2e::with_kafka(std::move(args), mock, kTopic, key);
}

std::vector<std::string> quarantine(const e2e::KafkaMock& mock, const std::vector<std::string>& verb,
                                    const std::string& key) {
  return e2e::kafka_quarantine(mock, kTopic, verb, key);
}

// The poison plugin as the fleet's handler: a record that crashes it once
// is dead-lettered.
std::vector<std::string> worker(const e2e::KafkaMock& mock, const std::string& key, bool until_idle) {
  std::vector<std::string> args = {"worker",        "--kafka",        mock.bootstrap(), "--topic", kTopic,
                                   "--jobs",        "1",              "--max-attempts", "1",       "--session-timeout",
                                   "6s",            "--fleet-key",    key,              "--handler",
                                   e2e::poison_plugin()};
  if (until_idle) args.insert(args.end(), {"--exit-when-idle", "3s"});
  return args;
}

// `size` random lowercase letters (never the token) with the token at `at`.
std::string junk_around_token(std::size_t size, std::size_t at, unsigned seed) {
  std::mt19937 rng(seed);
  std::string bytes(size, 'a');
  for (char& c : bytes) c = static_cast<char>('a' + rng() % 26);
  bytes.replace(at, kToken.size(), kToken);
  return bytes;
}

json shown(const e2e::KafkaMock& mock, const std::string& id, const std::string& key) {
  return e2e::kafka_shown(mock, kTopic, id, key);
}

}  // namespace

TEST_CASE("kafka minimize and patch: payloads kept in T.dlq.minimized and T.dlq.revisions; a patch replayed resolves") {
  e2e::KafkaMock mock({{kTopic, 1},
                       {kTopic + ".pillbox-attempts", 1},
                       {kTopic + ".dlq", 1},
                       {kTopic + ".results", 1},
                       {kTopic + ".dlq.state", 1}});
  REQUIRE_KAFKA_MOCK(mock);
  e2e::TempDir dir(0700);
  const std::string key = e2e::fleet_key_file(dir);
  const std::string shrunk = junk_around_token(600, 311, 29);
  const std::string patched = junk_around_token(90, 40, 30);
  e2e::produce(mock.bootstrap(), kTopic,
               {{std::string("k-shrunk"), shrunk, {}, 0}, {std::string("k-patched"), patched, {}, 0}});
  const auto worked = e2e::run_pillbox(worker(mock, key, true));
  REQUIRE_MESSAGE(worked.exit_code == 0, worked.describe());
  std::map<std::string, std::string> ids;  // key -> record id
  for (const auto& r : e2e::read_topic(mock.bootstrap(), kTopic + ".dlq")) {
    ids[*r.key] = std::to_string(r.partition) + "@" + std::to_string(r.offset);
  }
  REQUIRE(ids.size() == 2);
  const std::string small = ids["k-shrunk"];
  const std::string fixed = ids["k-patched"];
  const std::vector<std::string> minimize = {"minimize", small, "--jobs", "1", "--json", "--quiet",
                                             "--handler", e2e::poison_plugin()};

  // No T.dlq.minimized: said, with how to make it, and not made by naming it.
  const auto no_topic = e2e::run_pillbox(with_kafka(minimize, mock, key));
  CHECK_MESSAGE(no_topic.exit_code == 3, no_topic.describe());
  CHECK_MESSAGE(no_topic.err.find("has no topic tasks.dlq.minimized") != std::string::npos, no_topic.describe());
  CHECK(no_topic.err.find("kafka-topics.sh") != std::string::npos);
  CHECK(e2e::topic_partitions(mock.bootstrap(), kTopic + ".dlq.minimized") == 0);
  mock.create_topic(kTopic + ".dlq.minimized", 1);

  // Shrunk to the trigger; its progress and result with the record.
  const auto run = e2e::run_pillbox(with_kafka(minimize, mock, key));
  INFO(run.describe());
  REQUIRE(run.exit_code == 0);
  REQUIRE(run.records.size() == 1);
  CHECK(run.records[0]["original_size"] == shrunk.size());
  CHECK(run.records[0]["minimized_size"] == kToken.size());
  CHECK(run.records[0]["finished"] == true);
  const std::string token_sha = pillbox::sha256_hex(std::string(kToken));
  CHECK(run.records[0]["minimized_sha256"] == token_sha);
  const json record = shown(mock, small, key);
  CHECK(record.value("minimized_sha256", "") == token_sha);
  const std::string out = dir.path() + "/min.bin";
  const auto exported = e2e::run_pillbox(quarantine(mock, {"export", small, "--minimized", "-o", out}, key));
  CHECK_MESSAGE(exported.exit_code == 0, exported.describe());
  CHECK(e2e::read_file(out) == kToken);
  int kept = 0;
  for (const auto& r : e2e::read_topic(mock.bootstrap(), kTopic + ".dlq.minimized")) {
    CHECK(r.header("pillbox-minimized-of") == std::optional<std::string>(small));
    CHECK(r.value->size() <= shrunk.size());
    ++kept;
  }
  CHECK(kept >= 1);
  // Another record's payload is never this one's: the minimized payload of
  // `fixed`, which has none, is refused; an entry claiming to be `small`'s
  // but with other bytes is not what its state names (the sha256).
  const auto none = e2e::run_pillbox(quarantine(mock, {"export", fixed, "--minimized", "-o", out + "2"}, key));
  CHECK(none.exit_code == 2);
  CHECK(none.err.find("has no minimized payload") != std::string::npos);
  // Again: resumed from what T.dlq.minimized holds, nothing more to do.
  const auto again = e2e::run_pillbox(with_kafka(minimize, mock, key));
  REQUIRE_MESSAGE(again.exit_code == 0, again.describe());
  REQUIRE(again.records.size() == 1);
  CHECK(again.records[0]["minimized_size"] == kToken.size());

  // patch: its revision kept in T.dlq.revisions (made by the operator), signed.
  const std::string good = "a good payload, the fix by hand";
  const std::string file = dir.write("good.bin", good);
  const std::vector<std::string> patch = {"patch", fixed, "--payload-file", file, "--note", "the trigger cut out"};
  const auto no_revisions = e2e::run_pillbox(quarantine(mock, patch, key));
  CHECK_MESSAGE(no_revisions.exit_code == 3, no_revisions.describe());
  CHECK(no_revisions.err.find("has no topic tasks.dlq.revisions") != std::string::npos);
  CHECK(e2e::topic_partitions(mock.bootstrap(), kTopic + ".dlq.revisions") == 0);
  mock.create_topic(kTopic + ".dlq.revisions", 1);
  const auto patched_run = e2e::run_pillbox(quarantine(mock, patch, key));
  REQUIRE_MESSAGE(patched_run.exit_code == 0, patched_run.describe());
  const json with_revision = shown(mock, fixed, key);
  REQUIRE(with_revision["revisions"].is_array());
  REQUIRE(with_revision["revisions"].size() == 1);
  CHECK(with_revision["revisions"][0]["signature"] == "valid");
  CHECK(with_revision["revisions"][0]["payload_sha256"] == pillbox::sha256_hex(good));
  const auto revisions = e2e::read_topic(mock.bootstrap(), kTopic + ".dlq.revisions");
  REQUIRE(revisions.size() == 1);
  CHECK(revisions[0].header("pillbox-revision-of") == std::optional<std::string>(fixed));
  CHECK(revisions[0].value == std::optional<std::string>(good));

  // Replayed: the revision's bytes go back under the record's key, the
  // worker (the same poison plugin) runs them ok, and the record resolves.
  e2e::Background fleet(e2e::pillbox_binary(), worker(mock, key, false));
  const auto replay = e2e::run_pillbox(quarantine(mock, {"replay", fixed, "--batch-timeout", "60s", "--json"}, key));
  INFO(replay.describe());
  CHECK(replay.exit_code == 0);
  CHECK(replay.err.find("1 selected, 1 replayed: 1 resolved, 0 failed again") != std::string::npos);
  CHECK(shown(mock, fixed, key).value("status", "") == "resolved");
  int republished = 0;
  for (const auto& r : e2e::read_topic(mock.bootstrap(), kTopic)) {
    if (r.header("pillbox.replay") != std::optional<std::string>(fixed)) continue;
    ++republished;
    CHECK(r.key == std::optional<std::string>("k-patched"));
    CHECK(r.value == std::optional<std::string>(good));
  }
  CHECK(republished == 1);
  fleet.signal(SIGTERM);
  CHECK(fleet.wait() == 128 + SIGTERM);
}

// What anyone allowed to produce to T.dlq.state, T.dlq.minimized and
// T.dlq.revisions can write, by the compare and set pillbox uses itself:
// claims that are checked, never taken.
TEST_CASE("kafka minimize and patch: forged states and payload entries are checked, not taken") {
  e2e::KafkaMock mock({{kTopic, 1},
                       {kTopic + ".pillbox-attempts", 1},
                       {kTopic + ".dlq", 1},
                       {kTopic + ".results", 1},
                       {kTopic + ".dlq.state", 1},
                       {kTopic + ".dlq.minimized", 1},
                       {kTopic + ".dlq.revisions", 1}});
  REQUIRE_KAFKA_MOCK(mock);
  e2e::TempDir dir(0700);
  const std::string key = e2e::fleet_key_file(dir);
  const std::string payload = junk_around_token(64, 10, 31);
  e2e::produce(mock.bootstrap(), kTopic,
               {{std::string("k0"), payload, {}, 0}, {std::string("k1"), junk_around_token(64, 30, 32), {}, 0}});
  const auto worked = e2e::run_pillbox(worker(mock, key, true));
  REQUIRE_MESSAGE(worked.exit_code == 0, worked.describe());
  REQUIRE(e2e::read_topic(mock.bootstrap(), kTopic + ".dlq").size() == 2);
  const std::string record = "0@0";
  const std::string other = "0@1";

  auto bootstrap = pillbox::broker::parse_kafka_bootstrap(mock.bootstrap());
  REQUIRE(bootstrap.has_value());
  auto reader = pillbox::broker::KafkaPartitionReader::open(*bootstrap, "pillbox-test-forger");
  REQUIRE_MESSAGE(reader.has_value(), reader.error());
  pillbox::broker::KafkaStateLog access(**reader, kTopic);
  pillbox::broker::FleetStateLog log(access);
  auto payloads = pillbox::broker::KafkaPayloadLog::minimized(**reader, kTopic);
  auto forge = [&](const std::string& id, const std::function<void(pillbox::broker::FleetState&)>& change) {
    auto written = log.change(id, [&](pillbox::broker::FleetState& s) {
      change(s);
      return pillbox::Status::ok();
    });
    REQUIRE_MESSAGE(written.has_value(), written.error());
  };
  auto at = [&](const std::string& id, const std::string& bytes) {
    auto offset = payloads->append(id, bytes);
    REQUIRE_MESSAGE(offset.has_value(), offset.error());
    return *offset;
  };
  // A null value where a payload should be.
  const auto null_at = e2e::produce(mock.bootstrap(), kTopic + ".dlq.minimized",
                                    {{std::nullopt, std::nullopt, {{"pillbox-minimized-of", record}}, 0}});
  REQUIRE(null_at.size() == 1);
  const std::string evil = "EVIL";
  const std::string oversized(payload.size() + 1, 'S');
  struct Claim {
    std::string sha256;   // of the minimized payload, as the forged state says
    std::int64_t at;      // where it is, likewise
    std::string refused;  // what export says of it
  };
  const std::vector<Claim> claims = {
      {pillbox::sha256_hex(evil), at(other, evil), "is not a payload of record " + record},
      {pillbox::sha256_hex(std::string(kToken)), at(record, evil), "does not match the sha256 its state names"},
      {pillbox::sha256_hex(oversized), at(record, oversized), "is 65 bytes, more than the record's own payload (64)"},
      {pillbox::sha256_hex(evil), 1'000'000'000'000, "which ends before it"},
      {pillbox::sha256_hex(evil), -1, "its state names no offset"},
      {pillbox::sha256_hex(evil), null_at[0].second, "does not match the sha256 its state names"},
  };
  for (const Claim& claim : claims) {
    forge(record, [&](pillbox::broker::FleetState& s) {
      s.minimized_sha256 = claim.sha256;
      s.minimized_at = claim.at;
    });
    const auto exported = e2e::run_pillbox(quarantine(mock, {"export", record, "--minimized", "-o", "-"}, key));
    INFO(claim.refused);
    INFO(exported.describe());
    CHECK(exported.exit_code == 3);
    CHECK(exported.out.empty());
    CHECK(exported.err.find("the minimized payload of record " + record + " cannot be had: ") != std::string::npos);
    CHECK(exported.err.find(claim.refused) != std::string::npos);
  }

  // A forged progress, "finished", pointing at another record's payload:
  // not taken; the search starts over from the original and records its own.
  const std::string forged_best = std::string(kToken) + " forged best";
  forge(record, [&, o = at(other, forged_best)](pillbox::broker::FleetState& s) {
    s.minimize = pillbox::store::MinimizeState{pillbox::sha256_hex(forged_best), 3, 100, true};
    s.minimize_best_at = o;
  });
  const auto m = e2e::run_pillbox(with_kafka({"minimize", record, "--jobs", "1", "--json", "--quiet", "--handler",
                                              e2e::poison_plugin()},
                                             mock, key));
  INFO(m.describe());
  REQUIRE(m.records.size() == 1);
  CHECK(m.records[0]["resumed"] == false);
  CHECK(m.records[0]["finished"] == true);
  CHECK(m.records[0]["minimized_size"] == kToken.size());
  const auto honest = e2e::run_pillbox(quarantine(mock, {"export", record, "--minimized", "-o", "-"}, key));
  CHECK(honest.exit_code == 0);
  CHECK(honest.out == kToken);

  // A revision whose state names another record's entry of T.dlq.revisions:
  // replay refuses it and republishes nothing.
  auto revisions = pillbox::broker::KafkaPayloadLog::revisions(**reader, kTopic);
  const std::string good = "good bytes";
  auto elsewhere = revisions->append(other, good);
  REQUIRE(elsewhere.has_value());
  forge(record, [&](pillbox::broker::FleetState& s) {
    pillbox::broker::FleetRevision v;
    v.n = 1;
    v.at = *elsewhere;
    v.payload_sha256 = pillbox::sha256_hex(good);
    v.payload_size = static_cast<std::int64_t>(good.size());
    s.revisions.push_back(v);
  });
  const auto replay = e2e::run_pillbox(
      quarantine(mock, {"replay", record, "--trust-unsigned", "--batch-timeout", "20s", "--json"}, key));
  INFO(replay.describe());
  CHECK(replay.err.find("revision 1 cannot be replayed: offset " + std::to_string(*elsewhere) + " of " + kTopic +
                        ".dlq.revisions is not a payload of record " + record) != std::string::npos);
  CHECK(replay.err.find("1 selected, 0 replayed") != std::string::npos);
  for (const auto& r : e2e::read_topic(mock.bootstrap(), kTopic)) CHECK_FALSE(r.header("pillbox.replay").has_value());
}
