// The Kafka quarantine's trust boundaries attacked, on librdkafka's mock
// cluster (kafka_mock.h): whoever may produce to T.dlq.state, to
// T.pillbox-attempts or to T.dlq is the attacker.
//   T.dlq.state   junk (not JSON, nested 100 000 deep, over kMaxStateBytes,
//                 hostile versions, a flood of 5 000) is left out and
//                 counted, never applied, and never blocks a change; a
//                 forged state is believed (the documented limit) and
//                 printed without a terminal's escapes; a state too big
//                 to grow is refused by discard with a clear message; two
//                 discards at once: one wins each version, nothing lost or
//                 applied twice.
//   the lease     a forged lease that ends in 2^63-1 ms holds nothing (the
//                 record is replayed); a plausible one holds, its holder
//                 shown without escapes; a forged waiting entry is quoted
//                 without escapes; a forged allowance is not replayed.
//   attempt log   a lone forged "settled ok" of a replayed record's new
//                 place is not its outcome: the replay stops and says so;
//                 one forged with its start is believed (the documented
//                 limit).
//   T.dlq         a letter whose record names another source than its
//                 dedupe header, with hostile numbers and sizes, is listed,
//                 shown, exported and replayed without a crash.
// One mock cluster for all: each attack has records of its own. Each fails
// without its defence (tried, 2026-12-07: the fold taking any later version,
// change() not told it lost, the lease unbounded, the lone "ok" believed,
// the lease holder or replay's messages printed raw).
#include <doctest/doctest.h>
#include <signal.h>

#include <chrono>
#include <cstdint>
#include <limits>
#include <map>
#include <memory>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <vector>

#include "supervisor/broker/kafka_producer.h"
#include "tests/e2e/amqp_client.h"
#include "tests/e2e/background.h"
#include "tests/e2e/kafka_client.h"
#include "tests/e2e/kafka_mock.h"
#include "tests/e2e/support.h"
#include "tests/e2e/task_program.h"

using json = nlohmann::json;

namespace {

const std::string kTopic = "tasks";
const std::string kStateLog = kTopic + ".dlq.state";
// fleet_state_log.h's kMaxStateBytes.
constexpr std::size_t kMaxStateBytes = 1u << 20;

struct Fleet {
  const e2e::KafkaMock& mock;
  std::string key;  // the fleet key's file

  std::vector<std::string> quarantine(const std::vector<std::string>& verb) const {
    std::vector<std::string> args = {"quarantine"};
    args.insert(args.end(), verb.begin(), verb.end());
    args.insert(args.end(), {"--kafka", mock.bootstrap(), "--topic", kTopic, "--fleet-key", key});
    return args;
  }
  e2e::RunResult run(const std::vector<std::string>& verb) const { return e2e::run_pillbox(quarantine(verb)); }
  json shown(const std::string& id) const {
    const auto s = run({"show", id, "--json"});
    return s.exit_code == 0 && s.records.size() == 1 ? json(s.records[0]) : json();
  }
  std::vector<std::string> worker(const std::string& program, bool until_idle) const {
    std::vector<std::string> args = {"worker", "--kafka", mock.bootstrap(), "--topic", kTopic, "--jobs", "2",
                                     "--backoff-base", "10ms", "--session-timeout", "6s", "--fleet-key", key};
    if (until_idle) args.insert(args.end(), {"--exit-when-idle", "3s"});
    args.insert(args.end(), {"--", program});
    return args;
  }
};

std::int64_t now_ms() {
  return std::chrono::duration_cast<std::chrono::milliseconds>(std::chrono::system_clock::now().time_since_epoch())
      .count();
}

// An entry of T.dlq.state as a writer of that topic makes one: `state` is
// the record's state (fleet_state.h's JSON), given as text.
e2e::KafkaOutgoing state_entry(const json& body) {
  return {std::nullopt, body.dump(), {{"pillbox-writer", "forger"}}, 0};
}
e2e::KafkaOutgoing forged_state(const std::string& id, std::int64_t version, const json& state) {
  return state_entry({{"record", id}, {"version", version}, {"state", state.dump()}});
}
e2e::KafkaOutgoing raw_state(const std::string& text) { return {std::nullopt, text, {{"pillbox-writer", "forger"}}, 0}; }

// `value` appended to T.dlq.state by a producer that takes records larger
// than a default broker's (the test client's stops short of 1 MiB with
// pillbox's framing; a cluster whose max.message.bytes was raised takes them).
void produce_large(const e2e::KafkaMock& mock, const std::string& value) {
  auto producer = pillbox::broker::KafkaProducer::open(
      {{"bootstrap.servers", mock.bootstrap()}, {"message.max.bytes", std::to_string(4u << 20)}});
  REQUIRE_MESSAGE(producer.has_value(), producer.error());
  pillbox::broker::KafkaOutgoing m;
  m.topic = kStateLog;
  m.partition = 0;
  m.value = value;
  bool written = false;
  REQUIRE((*producer)->produce(m, [&](const auto& delivered) { written = delivered.has_value(); }));
  REQUIRE((*producer)->flush(30'000));
  REQUIRE(written);
}

// The place a replay republished record `id` to in T, once it is there.
std::optional<e2e::KafkaRecord> republished(const Fleet& f, const std::string& id) {
  for (const auto& r : e2e::read_topic(f.mock.bootstrap(), kTopic)) {
    if (r.header("pillbox.replay") == std::optional<std::string>(id)) return r;
  }
  return std::nullopt;
}

// An attempt-log entry about T's record p@o, as a forger writes one.
e2e::KafkaOutgoing attempt_entry(const e2e::KafkaRecord& at, const std::string& entry) {
  json j = {{"v", 1},          {"partition", at.partition}, {"offset", at.offset}, {"delivery", 1},
            {"entry", entry},  {"worker", "forger"},        {"group", "pillbox"},  {"at_ms", now_ms()}};
  if (entry == "settled") {
    j["how"] = "ok";
    j["where"] = "";
  }
  return {std::to_string(at.partition) + ":" + std::to_string(at.offset), j.dump(), {}, at.partition};
}

// The detail of the last audit entry of record `r` whose action is `action`.
std::string last_audit(const json& r, const std::string& action) {
  std::string detail;
  if (!r.is_object() || !r.contains("audit")) return detail;
  for (const json& a : r["audit"]) {
    if (a.value("action", "") == action) detail = a.value("detail", "");
  }
  return detail;
}

std::size_t count_audit(const json& r, const std::string& action) {
  std::size_t n = 0;
  if (!r.is_object() || !r.contains("audit")) return n;
  for (const json& a : r["audit"]) n += a.value("action", "") == action ? 1 : 0;
  return n;
}

// ---- T.dlq.state: junk, hostile versions, a flood -----------------------------------------------

// Nothing that is not a state pillbox writes is applied, and each is
// counted; an entry of version 2^63-1 is no next version; none of it stops
// the record's own first change. Returns how many entries were left out.
std::int64_t junk_states(const Fleet& f, const std::string& id) {
  const std::string nested(100'000, '[');
  const json discarded = {{"status", "discarded"},
                          {"audit", json::array({{{"at", 1}, {"actor", "forger"}, {"action", "discarded"},
                                                  {"detail", "forged"}}})}};
  // Over kMaxStateBytes, and a version 1 that discards the record if it
  // were read.
  json big = {{"record", id}, {"version", 1}, {"state", discarded.dump()}, {"pad", ""}};
  big["pad"] = std::string(kMaxStateBytes + 1 - big.dump().size(), 'x');
  std::vector<e2e::KafkaOutgoing> junk = {
      raw_state("not json \x1b[2J\x1b]0;pwn\x07"),
      raw_state(nested + std::string(100'000, ']')),
      state_entry({{"record", id}, {"version", 1}, {"state", nested}}),                      // state nested 100 000 deep
      state_entry({{"record", id}, {"version", 1}, {"state", "{\"status\": \"replaying\"}"}}),  // not a state one writes
      state_entry({{"record", 42}, {"version", 1}, {"state", discarded.dump()}}),
      state_entry({{"record", id}, {"version", "1"}, {"state", discarded.dump()}}),
      state_entry({{"record", id}, {"version", discarded}, {"state", discarded.dump()}}),
      raw_state("{\"record\": \"" + id + "\", \"version\": 1e308, \"state\": " + json(discarded.dump()).dump() + "}"),
      raw_state("{\"record\": \"" + id + "\", \"version\": 18446744073709551615, \"state\": " +
                json(discarded.dump()).dump() + "}"),
      raw_state("{\"record\": \"" + id + "\", \"version\": 1.5, \"state\": " + json(discarded.dump()).dump() + "}"),
      forged_state(id, 0, discarded),
      forged_state(id, -1, discarded),
      forged_state(id, std::numeric_limits<std::int64_t>::min(), discarded),
      forged_state(id, 1, {{"status", "discarded"}, {"audit", json::array({{{"actor", 7}}})}}),  // an actor of 7
  };
  const std::int64_t left_out = static_cast<std::int64_t>(junk.size()) + 1;  // and `big`
  // Well formed, and no next version of anything: not counted, not applied.
  junk.push_back(forged_state(id, std::numeric_limits<std::int64_t>::max(), discarded));
  e2e::produce(f.mock.bootstrap(), kStateLog, junk);
  produce_large(f.mock, big.dump());

  const json before = f.shown(id);
  REQUIRE(before.is_object());
  CHECK(before.value("status", "") == "quarantined");
  CHECK(count_audit(before, "discarded") == 0);
  // Its first change is version 1, in effect: the junk stopped nothing.
  const auto discard = f.run({"discard", id, "--reason", "ours"});
  CHECK_MESSAGE(discard.exit_code == 0, discard.describe());
  const json after = f.shown(id);
  CHECK(after.value("status", "") == "discarded");
  CHECK(count_audit(after, "discarded") == 1);
  CHECK(last_audit(after, "discarded").find("ours") != std::string::npos);
  return left_out;
}

// ---- T.dlq.state: forged states believed, printed safely; one too big to grow ------------------

void forged_states(const Fleet& f, const std::string& resolved_id, const std::string& big_id) {
  const std::string esc = "\x1b[2J\x1b]0;pwn\x07\r\x08\x7f\xc2\x9b""31m";
  const json resolved = {{"status", "resolved"},
                         {"updated_at", std::numeric_limits<std::int64_t>::max()},
                         {"audit", json::array({{{"at", -1}, {"actor", "op" + esc}, {"action", "resolved" + esc},
                                                 {"detail", "fixed" + esc}},
                                                {{"at", 1e300}, {"action", "noted"}}})}};
  // An audit trail of thousands of actions, the state just under what a
  // reader keeps: any change would take it over.
  json huge = {{"status", "quarantined"}, {"audit", json::array()}};
  for (int i = 0; i < 10'000; ++i) {
    huge["audit"].push_back({{"at", i}, {"actor", "forger"}, {"action", "noted"}, {"detail", std::to_string(i)}});
  }
  const std::size_t envelope = forged_state(big_id, 1, huge).value->size();
  REQUIRE(envelope < kMaxStateBytes - 64);
  huge["audit"].push_back({{"at", 0}, {"actor", "forger"}, {"action", "noted"}, {"detail", ""}});
  const std::size_t with_empty = forged_state(big_id, 1, huge).value->size();
  huge["audit"].back()["detail"] = std::string(kMaxStateBytes - 8 - with_empty, 'y');
  e2e::produce(f.mock.bootstrap(), kStateLog, {forged_state(resolved_id, 1, resolved)});
  produce_large(f.mock, *forged_state(big_id, 1, huge).value);

  // Believed: the state log is as trusted as Redis's NAME:dlq:state
  // (docs/distributed.md). Shown, and never a terminal's escape.
  const json r = f.shown(resolved_id);
  CHECK(r.value("status", "") == "resolved");
  const auto text = f.run({"show", resolved_id});
  CHECK_MESSAGE(text.exit_code == 0, text.describe());
  CHECK(text.out.find("fixed") != std::string::npos);
  CHECK_MESSAGE(e2e::terminal_unsafe(text.out + text.err).empty(), e2e::terminal_unsafe(text.out + text.err));

  const json big = f.shown(big_id);
  REQUIRE(big.is_object());
  CHECK(count_audit(big, "noted") == 10'001);
  const auto grown = f.run({"discard", big_id, "--reason", "too much"});
  CHECK(grown.exit_code != 0);
  CHECK_MESSAGE(grown.err.find("over the 1048576 a state in " + kStateLog + " may be") != std::string::npos,
                grown.describe());
  CHECK(f.shown(big_id).value("status", "") == "quarantined");
}

// ---- T.dlq.state: two discards at once -----------------------------------------------------------

// Each record discarded by two processes at once: exactly one says it
// discarded it, the other finds it discarded; its trail holds one discard;
// and every reader's state is the first entry of each version.
void racing_discards(const Fleet& f, const std::vector<std::string>& ids) {
  std::vector<std::unique_ptr<e2e::Background>> runs;
  for (const std::string& id : ids) {
    for (const char* who : {"first", "second"}) {
      runs.push_back(std::make_unique<e2e::Background>(e2e::pillbox_binary(),
                                                       f.quarantine({"discard", id, "--reason", who})));
    }
  }
  std::map<std::string, int> done, already;  // id -> how many said so
  for (std::size_t i = 0; i < runs.size(); ++i) {
    const std::string& id = ids[i / 2];
    CHECK_MESSAGE(runs[i]->wait() == 0, runs[i]->err());
    done[id] += runs[i]->out().find("record " + id + " discarded") != std::string::npos ? 1 : 0;
    already[id] += runs[i]->out().find("record " + id + " was already discarded") != std::string::npos ? 1 : 0;
  }
  // The log as entries: how many versions of each record were raced for.
  std::map<std::string, std::map<std::int64_t, int>> versions;
  for (const auto& e : e2e::read_topic(f.mock.bootstrap(), kStateLog)) {
    // The junk left aside (nested 100 000 deep, 1 MiB): pillbox's are objects.
    if (!e.value || e.value->size() > (64u << 10) || e.value->rfind("{", 0) != 0) continue;
    const json j = json::parse(*e.value, nullptr, false);
    if (j.is_object() && j.contains("record") && j["record"].is_string() && j.contains("version") &&
        j["version"].is_number_integer()) {
      ++versions[j["record"].get<std::string>()][j["version"].get<std::int64_t>()];
    }
  }
  int raced = 0;
  for (const std::string& id : ids) {
    CHECK_MESSAGE(done[id] == 1, id);
    CHECK_MESSAGE(already[id] == 1, id);
    const json r = f.shown(id);
    CHECK(r.value("status", "") == "discarded");
    CHECK_MESSAGE(count_audit(r, "discarded") == 1, r.dump());
    for (const auto& [v, n] : versions[id]) raced += n > 1 ? 1 : 0;
  }
  MESSAGE(raced << " version(s) written twice by discards that raced (the second lost and was tried again)");
}

}  // namespace

TEST_CASE("kafka quarantine under attack: T.dlq.state, a replay's lease, the attempt log, hostile letters") {
  e2e::KafkaMock mock({{kTopic, 2},
                       {kTopic + ".pillbox-attempts", 2},
                       {kTopic + ".dlq", 2},
                       {kTopic + ".results", 2},
                       {kStateLog, 1}});
  REQUIRE_KAFKA_MOCK(mock);
  e2e::TempDir dir(0700);
  const Fleet f{mock, e2e::fleet_key_file(dir)};
  e2e::PoisonCopy broken("kafka_task");
  constexpr int kRecords = 11;
  std::string lines;
  for (int i = 0; i < kRecords; ++i) lines += e2e::task_line("bad-" + std::to_string(i), "E rejected " + std::to_string(i));
  const auto submitted = e2e::run_pillbox({"submit", "--kafka", mock.bootstrap(), "--topic", kTopic, "-"}, lines);
  REQUIRE_MESSAGE(submitted.exit_code == 0, submitted.describe());
  const auto worked = e2e::run_pillbox(f.worker(broken.path(), true));
  REQUIRE_MESSAGE(worked.exit_code == 0, worked.describe());
  std::vector<std::string> ids;  // record ids, by the task's number
  {
    std::map<std::string, std::string> by_key;
    for (const auto& r : e2e::read_topic(mock.bootstrap(), kTopic + ".dlq")) {
      by_key.emplace(*r.key, std::to_string(r.partition) + "@" + std::to_string(r.offset));  // a copy's is later
    }
    REQUIRE(by_key.size() == kRecords);
    for (int i = 0; i < kRecords; ++i) ids.push_back(by_key.at("bad-" + std::to_string(i)));
  }

  // ---- T.dlq.state ----
  std::int64_t left_out = junk_states(f, ids[0]);  // and the flood, at the end
  forged_states(f, ids[1], ids[2]);
  racing_discards(f, {ids[3], ids[4]});

  // ---- the lease ----
  // Forged to end in 2^63-1 ms, by a name with escapes: no lease any
  // replay writes, so it holds nothing (replayed below, once a worker runs).
  const std::string esc = "\x1b[2J\x1b]0;pwn\x07";
  const std::string& forever = ids[5];
  e2e::produce(mock.bootstrap(), kStateLog,
               {forged_state(forever, 1, {{"status", "quarantined"},
                                          {"lease", {{"by", "forger" + esc}, {"until", std::numeric_limits<std::int64_t>::max()}}}})});
  CHECK(f.shown(forever).value("status", "") == "quarantined");
  // A plausible one (30 s on) holds: replay and discard refused, the
  // holder named without escapes.
  const std::string& held = ids[6];
  e2e::produce(mock.bootstrap(), kStateLog,
               {forged_state(held, 1, {{"status", "quarantined"},
                                       {"lease", {{"by", "forger" + esc}, {"until", now_ms() + 30'000}}}})});
  const auto refused = f.run({"replay", held});
  CHECK(refused.err.find("record " + held + " is being replayed right now by forger") != std::string::npos);
  CHECK_MESSAGE(e2e::terminal_unsafe(refused.out + refused.err).empty(), e2e::terminal_unsafe(refused.out + refused.err));
  const auto no_discard = f.run({"discard", held, "--reason", "x"});
  CHECK(no_discard.exit_code == 2);
  CHECK(no_discard.err.find("is being replayed right now (by forger") != std::string::npos);
  CHECK_MESSAGE(e2e::terminal_unsafe(no_discard.out + no_discard.err).empty(),
                e2e::terminal_unsafe(no_discard.out + no_discard.err));
  // A forged waiting entry: not redriven, and quoted without escapes.
  const std::string& waiting = ids[7];
  e2e::produce(mock.bootstrap(), kStateLog,
               {forged_state(waiting, 1, {{"status", "quarantined"}, {"waiting_entry", "tasks/0@99" + esc}})});
  const auto not_again = f.run({"replay", waiting});
  CHECK_MESSAGE(not_again.err.find("its earlier redrive (tasks/0@99") != std::string::npos, not_again.describe());
  CHECK_MESSAGE(e2e::terminal_unsafe(not_again.out + not_again.err).empty(), e2e::terminal_unsafe(not_again.out + not_again.err));
  CHECK(!republished(f, waiting));
  // A forged allowance: its status says allowed, its signature is no
  // operator's, so replay --allowed does not take it.
  const std::string& allowed = ids[10];
  e2e::produce(mock.bootstrap(), kStateLog,
               {forged_state(allowed, 1, {{"status", "allowed"},
                                          {"allowance", {{"at", 1}, {"actor", "forger"}, {"sig", "AAAA"}}}})});
  const auto not_allowed = f.run({"replay", "--allowed"});
  CHECK_MESSAGE(not_allowed.err.find("record " + allowed + "'s allowance does not match the fleet key") !=
                    std::string::npos,
                not_allowed.describe());
  CHECK(!republished(f, allowed));

  // ---- the attempt log ----
  // A start and a settled "ok" forged for a replayed record's new place
  // are believed: the documented limit (only workers should write there).
  const std::string& pair = ids[9];
  {
    e2e::Background replay(e2e::pillbox_binary(), f.quarantine({"replay", pair, "--batch-timeout", "60s"}));
    std::optional<e2e::KafkaRecord> at;
    REQUIRE_MESSAGE(e2e::eventually([&] { return (at = republished(f, pair)).has_value(); }), replay.err());
    e2e::produce(mock.bootstrap(), kTopic + ".pillbox-attempts", {attempt_entry(*at, "start"), attempt_entry(*at, "settled")});
    CHECK_MESSAGE(replay.wait() == 0, replay.err());
    CHECK(last_audit(f.shown(pair), "replayed").find("on worker forger") != std::string::npos);
  }
  // A lone forged "ok" (no start of its delivery before it): not the
  // outcome. The workers skip a record settled in the log, so none will
  // come: the replay stops at once and says why; the record waits.
  const std::string& lone = ids[8];
  {
    e2e::Background replay(e2e::pillbox_binary(), f.quarantine({"replay", lone, "--batch-timeout", "60s"}));
    std::optional<e2e::KafkaRecord> at;
    REQUIRE_MESSAGE(e2e::eventually([&] { return (at = republished(f, lone)).has_value(); }), replay.err());
    e2e::produce(mock.bootstrap(), kTopic + ".pillbox-attempts", {attempt_entry(*at, "settled")});
    CHECK_MESSAGE(replay.wait() == 3, replay.err());
    CHECK_MESSAGE(replay.err().find("record " + lone + ": the settled entry of its redrive tasks/" +
                                    std::to_string(at->partition) + "@" + std::to_string(at->offset) +
                                    " in tasks.pillbox-attempts says ok with no start entry") != std::string::npos,
                  replay.err());
    const json r = f.shown(lone);
    CHECK(r.value("status", "") != "resolved");
    CHECK(count_audit(r, "replayed") == 0);
  }

  // The lease forged for ever held nothing: replayed, resolved.
  e2e::Background fixed(e2e::pillbox_binary(), f.worker("/bin/cat", false));
  const auto replayed = f.run({"replay", forever, "--batch-timeout", "60s", "--json"});
  CHECK_MESSAGE(replayed.exit_code == 0, replayed.describe());
  REQUIRE(replayed.records.size() == 1);
  CHECK(replayed.records[0].value("replay", "") == "resolved");

  // ---- T.dlq: a letter that says two things, with hostile numbers ----
  const json record = {{"kind", "crash"},
                       {"fingerprint", "f" + esc},
                       {"message", std::string(20'000, 'm') + esc},
                       {"deliveries", 1e300},
                       {"created_at", -9223372036854775807LL - 1},
                       {"payload_size", 18446744073709551615ULL},
                       {"signal", "SIGSEGV" + esc},
                       {"crash_state", json::array({std::string(4000, 'c'), 1e308, json::object()})},
                       {"attempts", json::array({{{"n", -1}, {"ended_at", 1e300}}, 42, "x"})},
                       {"topic", {{"name", kTopic}, {"partition", 1}, {"offset", 5}}}};
  const auto letter_at = e2e::produce(mock.bootstrap(), kTopic + ".dlq",
                                      {{std::string("hostile"), std::string("hostile payload"),
                                        {{"pillbox-record", record.dump()},
                                         {"pillbox.dedupe", kTopic + "/0@3"},
                                         {"pillbox.source.topic", kTopic},
                                         {"pillbox.source.partition", "0"},
                                         {"pillbox.source.offset", "3"},
                                         {"pillbox.attempts", "99999999999999999999"},
                                         {"pillbox.kind", "crash"}},
                                        0}});
  const std::string letter = std::to_string(letter_at[0].first) + "@" + std::to_string(letter_at[0].second);
  // (list --json: with the flood, below.)
  const auto list = f.run({"list"});
  CHECK_MESSAGE(list.exit_code == 0, list.describe());
  CHECK_MESSAGE(e2e::terminal_unsafe(list.out + list.err).empty(), e2e::terminal_unsafe(list.out + list.err));
  const auto show = f.run({"show", letter});
  CHECK_MESSAGE(show.exit_code == 0, show.describe());
  CHECK_MESSAGE(e2e::terminal_unsafe(show.out + show.err).empty(), e2e::terminal_unsafe(show.out + show.err));
  const json shown = f.shown(letter);
  CHECK(shown.value("signature", "") == "missing");
  CHECK(shown.dump().find("names another source than its pillbox.source.* headers") != std::string::npos);
  const std::string out = dir.path() + "/hostile";
  const auto exported = f.run({"export", letter, "-o", out});
  CHECK_MESSAGE(exported.exit_code == 0, exported.describe());
  CHECK(e2e::read_file(out) == "hostile payload");
  const auto unsigned_replay = f.run({"replay", letter});
  CHECK(unsigned_replay.err.find("unsigned") != std::string::npos);
  CHECK(!republished(f, letter));
  const auto trusted = f.run({"replay", letter, "--trust-unsigned", "--batch-timeout", "60s", "--json"});
  CHECK_MESSAGE(trusted.exit_code == 0, trusted.describe());
  REQUIRE(trusted.records.size() == 1);
  CHECK(trusted.records[0].value("replay", "") == "resolved");

  // ---- T.dlq.state, last (every read after it reads it all) ----
  // A flood of junk: left out and counted, each read bounded; measured.
  constexpr int kFlood = 5000;
  const double unflooded = f.run({"list", "--json"}).seconds;
  {
    std::vector<e2e::KafkaOutgoing> flood;
    for (int i = 0; i < kFlood; ++i) flood.push_back(raw_state("junk " + std::to_string(i)));
    e2e::produce(mock.bootstrap(), kStateLog, flood);
    left_out += kFlood;
  }
  const auto listed = f.run({"list", "--json"});
  REQUIRE_MESSAGE(listed.exit_code == 0, listed.describe());
  CHECK(listed.records.size() == kRecords + 1);  // and the hostile letter
  CHECK_MESSAGE(listed.err.find(std::to_string(left_out) + " records of " + kStateLog +
                                " left out: not a state pillbox writes") != std::string::npos,
                listed.describe());
  CHECK(listed.seconds < 30);
  MESSAGE("list with " << left_out << " junk entries in " << kStateLog << ": " << listed.seconds << " s (with "
                       << left_out - kFlood << ": " << unflooded << " s)");

  fixed.signal(SIGTERM);
  CHECK(fixed.wait() == 128 + SIGTERM);
}
