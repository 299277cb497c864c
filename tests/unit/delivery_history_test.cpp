// The fleet's history of an entry (supervisor/broker/delivery_history.h):
// what each delivery recorded, which deliveries never reported back, and
// what the retry policy makes of them. Pure: no Redis.
#include <doctest/doctest.h>

#include <nlohmann/json.hpp>

#include "supervisor/broker/delivery_history.h"
#include "supervisor/broker/stream_entry.h"
#include "supervisor/flow/retry_policy.h"

namespace {

using namespace pillbox;
using namespace pillbox::broker;

Outcome crash(const std::string& fingerprint) {
  Outcome o;
  o.kind = Kind::kCrash;
  o.signal = 11;
  o.fingerprint = fingerprint;
  o.crash_state = {"parse_header", "main"};
  o.message = "killed by SIGSEGV";
  return o;
}

TEST_CASE("delivery history: a recorded outcome survives the JSON round trip") {
  const auto d = recorded_outcome(3, "host:12", 1700000000123, crash("pb1-aa"), true, false);
  const auto back = parse_delivery(3, delivery_json(d));
  REQUIRE(back.has_value());
  CHECK(back->delivery == 3);
  CHECK(back->worker == "host:12");
  CHECK(back->at_ms == 1700000000123);
  CHECK(back->kind == "crash");
  CHECK(back->fingerprint == "pb1-aa");
  CHECK(back->charged);
  CHECK_FALSE(back->transient);
  CHECK(back->signal == 11);
  CHECK(back->crash_state == std::vector<std::string>{"parse_header", "main"});
  const Outcome o = outcome_of(*back);
  CHECK(o.kind == Kind::kCrash);
  CHECK(o.fingerprint == "pb1-aa");
}

TEST_CASE("delivery history: a message is bounded and bytes that are not UTF-8 do not break the record") {
  Outcome o = crash("pb1-bb");
  o.message = std::string(10000, 'm') + "\xff\xfe";
  const auto back = parse_delivery(1, delivery_json(recorded_outcome(1, "w", 0, o, true, false)));
  REQUIRE(back.has_value());
  CHECK(back->message.size() == kMaxRecordedMessage);
}

TEST_CASE("delivery history: fields that are not ours are unreadable, never a crash and never charged") {
  for (const char* garbage : {"", "not json", "[1,2]", "{\"kind\": 5}", "{\"kind\": \"no-such-kind\"}",
                              "{\"charged\": \"yes\"}", "{\"signal\": 1e300}", "{\"exit_code\": -1e30}",
                              "{\"exit_code\": 4294967296}", "{\"cpu_ms\": -1}", "{\"at_ms\": 18446744073709551615}",
                              "{\"wall_ms\": 1.5}"}) {
    INFO(garbage);
    CHECK_FALSE(parse_delivery(1, garbage).has_value());
    const auto h = entry_history(2, {{1, garbage}});
    CHECK(h.unreadable == 1);
    REQUIRE(h.recorded.size() == 1);
    CHECK_FALSE(h.recorded[0].charged);
    CHECK(h.lost.empty());
  }
}

TEST_CASE("delivery history: deliveries with nothing recorded are lost; the last one lost makes the next run alone") {
  const std::string one = delivery_json(recorded_outcome(1, "a", 0, crash("pb1-x"), true, false));
  auto h = entry_history(5, {{1, one}, {3, one}});
  CHECK(h.lost == std::vector<std::uint32_t>{2, 4});
  CHECK(h.last_lost);
  CHECK(h.recorded.size() == 2);
  h = entry_history(4, {{1, one}, {2, one}, {3, one}});
  CHECK(h.lost.empty());
  CHECK_FALSE(h.last_lost);
  // Fields past the current delivery (a later writer's) are not this delivery's past.
  h = entry_history(2, {{1, one}, {7, one}});
  CHECK(h.recorded.size() == 1);
  CHECK(entry_history(1, {}).lost.empty());
  CHECK_FALSE(entry_history(1, {}).last_lost);
}

TEST_CASE("delivery history: a suspect's delivery counts as lost only when its start was recorded") {
  const std::string crashed = delivery_json(recorded_outcome(1, "a", 0, crash("pb1-x"), true, false));
  const std::string started = delivery_json(recorded_start(2, "b", 0));
  const auto marker = parse_delivery(2, started);
  REQUIRE(marker.has_value());
  CHECK(marker->started);
  CHECK(marker->kind.empty());
  CHECK_FALSE(parse_delivery(1, crashed)->started);

  // Held by three workers that died: the first may have run it; the next
  // two were suspects' deliveries that never started (no marker).
  auto h = entry_history(4, {});
  CHECK(h.lost == std::vector<std::uint32_t>{1});
  CHECK(h.unstarted == std::vector<std::uint32_t>{2, 3});
  CHECK(h.last_lost);  // still a suspect: runs alone, start recorded first
  // A suspect that started and never reported back is lost, and so is the
  // one after it when it started too: a payload that kills its workers.
  h = entry_history(4, {{2, started}, {3, delivery_json(recorded_start(3, "c", 1796158239834))}});
  CHECK(h.lost == std::vector<std::uint32_t>{1, 2, 3});
  CHECK(h.unstarted.empty());
  // The workers that began them are known (the record names them); the
  // first delivery's is not (nothing was recorded).
  REQUIRE(h.lost_starts.size() == 2);
  CHECK(h.lost_starts[0].delivery == 2);
  CHECK(h.lost_starts[0].worker == "b");
  CHECK(h.lost_starts[1].delivery == 3);
  CHECK(h.lost_starts[1].worker == "c");
  CHECK(h.lost_starts[1].at_ms == 1796158239834);
  CHECK(h.recorded.empty());  // markers are not outcomes
  CHECK(h.last_lost);
  // Once a delivery reported back, the next is no suspect's: nothing
  // recorded for it counts as lost again.
  h = entry_history(5, {{2, started}, {3, crashed}});
  CHECK(h.lost == std::vector<std::uint32_t>{1, 2, 4});
  CHECK(h.unstarted.empty());
  CHECK(h.recorded.size() == 1);
  // A marker the outcome replaced is an ordinary record.
  h = entry_history(3, {{1, crashed}, {2, crashed}});
  CHECK(h.lost.empty());
  CHECK_FALSE(h.last_lost);
}

TEST_CASE("delivery history: a suspect given back unrun stays a suspect; any other release ends the suspicion") {
  const auto given_back = recorded_suspect_release(2, "b", 5, "released: another suspect runs alone here");
  const auto read = parse_delivery(2, delivery_json(given_back));
  REQUIRE(read.has_value());
  CHECK(read->keeps_suspicion);
  CHECK(read->kind.empty());
  CHECK_FALSE(read->charged);
  CHECK_FALSE(parse_delivery(2, delivery_json(recorded_release(2, "b", 5, "released: the worker is stopping")))
                  ->keeps_suspicion);

  // 1 never reported back; 2 was a suspect's, given back unrun: 3 is a
  // suspect's still (runs alone), and 4, after 3 never reported back
  // either, too; neither 2 nor 3 is held against it.
  const std::string released = delivery_json(given_back);
  auto h = entry_history(3, {{2, released}});
  CHECK(h.lost == std::vector<std::uint32_t>{1});
  CHECK(h.last_lost);
  CHECK(h.recorded.size() == 1);  // carried on, as every release is
  h = entry_history(4, {{2, released}});
  CHECK(h.lost == std::vector<std::uint32_t>{1});
  CHECK(h.unstarted == std::vector<std::uint32_t>{3});
  CHECK(h.last_lost);
  // Claimed where nothing was suspected (2 came after 1 reported back): it
  // suspects nothing.
  const std::string crashed = delivery_json(recorded_outcome(1, "a", 0, crash("pb1-x"), true, false));
  h = entry_history(3, {{1, crashed}, {2, released}});
  CHECK_FALSE(h.last_lost);
  CHECK(h.lost.empty());
  // A plain release after a lost delivery ends the suspicion, as before.
  h = entry_history(3, {{2, delivery_json(recorded_release(2, "b", 5, "released: gave up here"))}});
  CHECK_FALSE(h.last_lost);
  // "suspect" on an outcome (it ran) or of the wrong type: not ours to read so.
  auto ran = nlohmann::json::parse(crashed);
  ran["suspect"] = true;
  CHECK_FALSE(parse_delivery(1, ran.dump())->keeps_suspicion);
  auto odd = nlohmann::json::parse(released);
  odd["suspect"] = "yes";
  CHECK_FALSE(parse_delivery(2, odd.dump()).has_value());
}

// The engine's history of a task (what StreamBackEnd::find hands it), then
// the current delivery's attempt as the engine appends it when it ends.
std::vector<store::AttemptSummary> with_current(std::vector<store::AttemptSummary> history,
                                                const RecordedDelivery& current) {
  store::AttemptSummary a;
  a.n = current.delivery;
  a.finished = true;
  a.kind = current.kind;
  a.fingerprint = current.fingerprint;
  a.charged = current.charged && !current.transient;
  history.push_back(std::move(a));
  return history;
}

TEST_CASE("delivery history: the retry policy judges the fleet's history (same crash on two workers -> quarantine)") {
  RetrySettings settings;
  const auto first = recorded_outcome(1, "worker-a", 0, crash("pb1-x"), true, false);
  const auto h = entry_history(2, {{1, delivery_json(first)}});
  const auto second = recorded_outcome(2, "worker-b", 0, crash("pb1-x"), true, false);
  CHECK(judge(settings, with_current(engine_history(h, 2), second), crash("pb1-x")).decision == Decision::kQuarantine);
  // Another crash site the second time: a retry.
  const auto other = recorded_outcome(2, "worker-b", 0, crash("pb1-y"), true, false);
  CHECK(judge(settings, with_current(engine_history(h, 2), other), crash("pb1-y")).decision == Decision::kRetry);
}

TEST_CASE("delivery history: releases and holds are not failures of the payload") {
  RetrySettings settings;
  settings.max_attempts = 2;
  const auto released = recorded_release(1, "a", 0, "released: the worker is stopping");
  Outcome o = crash("pb1-x");
  const auto held = recorded_outcome(2, "b", 0, o, false, false, "held: handler outage suspected");
  const auto h = entry_history(3, {{1, delivery_json(released)}, {2, delivery_json(held)}});
  CHECK(h.lost.empty());
  const auto now = recorded_outcome(3, "c", 0, crash("pb1-x"), true, false);
  // Only this delivery is charged: not two in a row, not max_attempts.
  CHECK(judge(settings, with_current(engine_history(h, 3), now), crash("pb1-x")).decision == Decision::kRetry);
}

TEST_CASE("delivery history: a dead letter names the workers its lost deliveries began on") {
  // Delivery 1 held by a worker that died (nothing recorded), 2 and 3
  // suspects' runs that began on workers b and c and never reported back:
  // supervisor-lost, and the record says where each began.
  WorkerSettings settings;
  settings.consumer.name = "d";
  HeldEntry e;
  e.task.key = "k";
  e.task.payload = "p";
  e.id = "1-1";
  e.delivery = 4;
  e.history = entry_history(4, {{2, delivery_json(recorded_start(2, "b", 1796158239000))},
                                {3, delivery_json(recorded_start(3, "c", 1796158240000))}});
  Outcome lost;
  lost.kind = Kind::kSupervisorLost;
  const auto record = nlohmann::json::parse(dead_letter_record(settings, e, lost, "it kills workers", 0));
  const auto& history = record.at("attempts_history");
  REQUIRE(history.size() == 3);
  CHECK(history[0].at("kind") == "supervisor-lost");
  CHECK_FALSE(history[0].contains("worker"));  // unknown: nothing was recorded
  CHECK(history[0].at("note") == "never reported back");
  CHECK(history[1].at("worker") == "b");
  CHECK(history[1].at("at_ms") == 1796158239000);
  CHECK(history[1].at("note") == "began to run and never reported back");
  CHECK(history[2].at("worker") == "c");
}

}  // namespace
