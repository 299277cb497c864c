// The fleet's quarantine records (supervisor/broker/fleet_record.h,
// fleet_state.h): a dead letter read back is the record the worker wrote,
// field for field; the operators' state survives its JSON; a lock makes a
// record `replaying`. Pure: no Redis.
#include <doctest/doctest.h>

#include <nlohmann/json.hpp>

#include "shared/sha256.h"
#include "supervisor/broker/delivery_history.h"
#include "supervisor/broker/fleet_record.h"
#include "supervisor/store/quarantine_entry.h"
#include "supervisor/store/quarantine_json.h"

namespace {

using namespace pillbox;
using namespace pillbox::broker;
using nlohmann::json;

Outcome crash() {
  Outcome o;
  o.kind = Kind::kCrash;
  o.signal = 11;
  o.fingerprint = "pb1-5c8f3c440617f9e7";
  o.crash_state = {"corrupt_record", "main"};
  o.message = "killed by SIGSEGV";
  o.cpu_ms = 3;
  o.wall_ms = 4;
  o.max_rss_kb = 1600;
  return o;
}

RunIdentity identity() {
  RunIdentity id;
  id.handler = "exec";
  id.handler_identity = "exec mixed_poison";
  id.handler_args = "{}";
  id.exec_argv = R"(["/x/mixed_poison","--flag"])";
  id.policy_identity = "exec@56fef913ecdf";
  id.policy = "[policy]\nname = exec\n";
  return id;
}

constexpr const char* kId = "1796159727174-0";
constexpr std::int64_t kIdMs = 1796159727174;

// The dead letter's fields as the worker writes them (dead_letter_fields)
// (supervisor/broker/stream_entry.cpp): the record is the store's JSON
// without "id" and "new_fingerprint", plus the worker's fields.
EntryFields dead_letter_of(const store::QuarantineRecord& r, const std::string& payload) {
  json j = json::parse(quarantine_record_json(r, 2, false, ""));
  j.erase("id");
  j.erase("new_fingerprint");
  j["policy"] = r.entry.policy;
  j["reason"] = "crash twice in a row";
  j["stream"] = {{"name", "jobs"}, {"group", "pillbox"}, {"entry", "1796159727100-0"}};
  j["deliveries"] = 3;
  j["attempts_history"] = json::array(
      {{{"delivery", 1}, {"kind", "supervisor-lost"}, {"note", "never reported back"}},
       json::parse(delivery_json(recorded_outcome(2, "host:1", kIdMs - 5, crash(), true, false))),
       json::parse(delivery_json(recorded_outcome(3, "host:2", kIdMs - 1, crash(), true, false)))});
  return {{"key", r.entry.key},       {"payload", payload},         {"kind", "crash"},
          {"fingerprint", r.entry.fingerprint}, {"deliveries", "3"}, {"entry", "1796159727100-0"},
          {"record", j.dump()}};
}

store::QuarantineRecord written(const std::string& payload) {
  store::QuarantineRecord r;
  r.entry = make_quarantine_entry(identity(), crash(), "segv-1", sha256_hex(payload),
                                  static_cast<std::int64_t>(payload.size()), "worker");
  r.created_at = r.updated_at = kIdMs;
  return r;
}

TEST_CASE("fleet record: a dead letter reads back as the record the worker wrote, field for field") {
  const std::string payload("S one\x00\xff", 7);
  const store::QuarantineRecord original = written(payload);
  const FleetRecord back = parse_dead_letter(kId, dead_letter_of(original, payload));
  CHECK(back.id == kId);
  CHECK(back.payload == payload);
  CHECK(back.redrive_of.empty());
  CHECK(back.record.created_at == kIdMs);
  // What list --json prints is what the worker put in the dead letter.
  CHECK(quarantine_record_json(back.record, 0, false, "where") == quarantine_record_json(original, 0, false, "where"));
  CHECK(back.record.entry.signal == 11);
  CHECK(back.record.entry.exit_code == -1);
  CHECK(back.record.entry.policy == identity().policy);
  CHECK(back.stream == "jobs");
  CHECK(back.group == "pillbox");
  CHECK(back.source_entry == "1796159727100-0");
  CHECK(back.reason == "crash twice in a row");
  CHECK(back.deliveries == 3);
  REQUIRE(back.attempts.size() == 3);
  CHECK(back.attempts[0].ended_at == 0);  // never reported back
  CHECK(back.attempts[0].n == 1);
  CHECK(back.attempts[1].worker == "host:1");
  CHECK(back.attempts[2].ended_at == kIdMs - 1);
  CHECK(back.attempts[2].fingerprint == original.entry.fingerprint);
  const Outcome o = pillbox::outcome_of(back.record.entry);
  CHECK(o.kind == Kind::kCrash);
  CHECK(o.fingerprint == original.entry.fingerprint);
  CHECK(o.crash_state == std::vector<std::string>{"corrupt_record", "main"});
}

TEST_CASE("fleet record: a dead letter without a readable record is still one, and says what it lacks") {
  const FleetRecord r = parse_dead_letter(kId, {{"key", "k"}, {"payload", "P"}, {"kind", "protocol-error"},
                                                {"fingerprint", "pb1-00"}, {"record", "not json"}});
  CHECK(r.record.entry.key == "k");
  CHECK(r.record.entry.kind == "protocol-error");
  CHECK(r.record.entry.payload_sha256 == sha256_hex("P"));
  CHECK(r.record.entry.message.find("no readable `record`") != std::string::npos);
  const FleetRecord redrive = parse_dead_letter(kId, {{"key", "k"}, {"payload", "P"}, {"redrive_of", "1-0"}});
  CHECK(redrive.redrive_of == "1-0");
}

TEST_CASE("fleet state: the operators' state survives its JSON; a lock makes a record replaying") {
  FleetState s;
  s.status = store::RecordStatus::kFailedAgain;
  s.updated_at = kIdMs + 10;
  s.audit.push_back({kIdMs + 5, "alice", "redriven", "put back"});
  FleetAttempt a;
  a.worker = "host:3";
  a.ended_at = kIdMs + 10;
  a.kind = "crash";
  a.fingerprint = "pb1-aa";
  a.entry = "1796159727200-0";
  a.outcome_entry = "1796159727210-0";
  s.redrives.push_back(a);
  s.waiting_entry = "1796159727300-0";
  s.reproduce_verdict = "reliable";
  s.reproduce_runs = 5;
  s.reproduce_matches = 5;
  s.minimize = store::MinimizeState{"ab12", 40, 900, true};
  s.minimized_sha256 = "ab12";
  auto back = parse_state(state_json(s));
  REQUIRE(back.has_value());
  CHECK(state_json(*back) == state_json(s));
  CHECK(back->audit.at(0).actor == "alice");
  CHECK(back->redrives.at(0).outcome_entry == "1796159727210-0");
  REQUIRE(back->minimize.has_value());
  CHECK(back->minimize->runs == 40);
  CHECK(back->minimize->finished);
  CHECK(back->minimize_best_at == -1);  // Redis: the payloads are under keys of the record's id
  CHECK(back->minimized_at == -1);
  CHECK(state_json(*back).find("_at\":-1") == std::string::npos);

  // RabbitMQ: where the payloads are in NAME.dlq.minimized; an offset that
  // is no whole number >= 0 is none.
  s.minimize_best_at = 7;
  s.minimized_at = 9;
  auto offsets = parse_state(state_json(s));
  REQUIRE(offsets.has_value());
  CHECK(offsets->minimize_best_at == 7);
  CHECK(offsets->minimized_at == 9);
  for (const std::string bad : {"-3", "1e300", "2.5", "\"7\"", "null"}) {
    auto hostile = parse_state(R"({"status":"quarantined","minimize":{"best_sha256":"ab","best_at":)" + bad +
                               R"(},"minimized_sha256":"ab","minimized_at":)" + bad + "}");
    REQUIRE_MESSAGE(hostile.has_value(), bad);
    CHECK(hostile->minimize_best_at == -1);
    CHECK(hostile->minimized_at == -1);
  }

  auto none = parse_state("");
  REQUIRE(none.has_value());
  CHECK(none->status == store::RecordStatus::kQuarantined);
  CHECK_FALSE(parse_state("{\"status\": \"replaying\"}").has_value());  // replaying is the lock, never stored
  CHECK_FALSE(parse_state("[1]").has_value());

  const std::string payload = "S";
  FleetRecord r = parse_dead_letter(kId, dead_letter_of(written(payload), payload));
  apply_state(r, *back, "bob on host:1:2");
  CHECK(r.record.status == store::RecordStatus::kReplaying);
  CHECK(r.replaying_by == "bob on host:1:2");
  CHECK(r.record.updated_at == kIdMs + 10);
  CHECK(r.record.reproduce_verdict == "reliable");
  CHECK(r.record.minimized_sha256 == "ab12");
  apply_state(r, *back, "");
  CHECK(r.record.status == store::RecordStatus::kFailedAgain);
}

TEST_CASE("fleet record: entry ids' times, and a result's outcome with binary output") {
  CHECK(entry_time_ms("1796159727174-0") == 1796159727174);
  CHECK(entry_time_ms("1796159727174") == 1796159727174);
  CHECK(entry_time_ms("abc") == 0);
  const Outcome ok = result_outcome({{"key", "k"}, {"output_b64", "Af8AIGJ5dGVz"}, {"cpu_ms", "7"}, {"wall_ms", "9"}});
  CHECK(ok.kind == Kind::kOk);
  CHECK(ok.output == std::string("\x01\xff\x00 bytes", 9));
  CHECK(ok.cpu_ms == 7);
  CHECK(ok.wall_ms == 9);
}

}  // namespace

TEST_CASE("fleet record: a count a record claims below 0 or past 2^32 is none") {
  const json j = {{"deliveries", -3},
                  {"attempts_history", json::array({{{"delivery", -1}, {"kind", "crash"}},
                                                    {{"delivery", 5000000000LL}, {"kind", "crash"}},
                                                    {{"delivery", 2}, {"kind", "crash"}}})}};
  FleetRecord r;
  DeadLetterClaims own;
  own.key = "k";
  read_worker_record(j, own, "", r);
  CHECK(r.deliveries == 0);
  REQUIRE(r.attempts.size() == 3);
  CHECK(r.attempts[0].n == 0);
  CHECK(r.attempts[1].n == 0);
  CHECK(r.attempts[2].n == 2);
  FleetRecord big;
  read_worker_record({{"deliveries", 4294967296LL}}, DeadLetterClaims{}, "", big);
  CHECK(big.deliveries == 0);
  FleetRecord fine;
  read_worker_record({{"deliveries", 7}}, DeadLetterClaims{}, "", fine);
  CHECK(fine.deliveries == 7);
  // repeats too: stats adds them up, and two of INT64_MAX overflowed.
  for (const std::int64_t bad : {std::int64_t{-1}, std::int64_t{4294967296LL}, INT64_MAX}) {
    FleetRecord r2;
    read_worker_record({{"repeats", bad}}, DeadLetterClaims{}, "", r2);
    CHECK(r2.record.repeats == 0);
  }
  FleetRecord folded;
  read_worker_record({{"repeats", 12}}, DeadLetterClaims{}, "", folded);
  CHECK(folded.record.repeats == 12);
}

TEST_CASE("iso time: read back exactly as written, anything else none") {
  for (const std::int64_t ms : {0LL, 1712345678901LL, 1735689599999LL, 4102444800000LL}) {
    CHECK(parse_iso_time(iso_time(ms)) == ms);
  }
  for (const char* bad : {"", "2026-11-30", "2026-11-30T14:39:00Z", "2026-11-30T14:39:00.123", "2026-13-30T14:39:00.123Z",
                          "2026-11-30T24:39:00.123Z", "2026-11-30 14:39:00.123Z", "2026-11-30T14:39:00.12xZ",
                          "+026-11-30T14:39:00.123Z"}) {
    CAPTURE(bad);
    CHECK_FALSE(parse_iso_time(bad).has_value());
  }
}
