// A Kafka topic's attempt log, the pure part (supervisor/broker/
// kafka_attempt_entry.h, kafka_attempts.h): entries as written and read
// back, hostile ones unreadable, the fold of a partition's entries into each
// record's history and settle, the commit's N and its metadata. No cluster.
#include <doctest/doctest.h>

#include <nlohmann/json.hpp>

#include "supervisor/broker/kafka_attempt_entry.h"
#include "supervisor/broker/kafka_attempts.h"
#include "supervisor/broker/worker_settings.h"
#include "supervisor/flow/retry_policy.h"
#include "tests/unit/amqp_worker_fixture.h"

namespace {

using namespace pillbox;
using namespace pillbox::broker;

// A SIGSEGV at `fingerprint`'s crash site.
Outcome crash(const std::string& fingerprint) {
  Outcome o = amqp_fixture::segv();  // the unit tests' crash (any broker's)
  o.fingerprint = fingerprint;
  o.crash_state = {"parse_header", "main"};
  return o;
}

// The entry as a record read from the attempt log's partition, at `log_offset`.
KafkaMessage read_back(const AttemptEntry& entry, std::int64_t log_offset) {
  const KafkaOutgoing out = attempt_entry_record("T", entry);
  KafkaMessage m;
  m.topic = out.topic;
  m.partition = out.partition;
  m.offset = log_offset;
  m.key = out.key;
  m.value = out.value;
  return m;
}

KafkaMessage raw(std::int32_t partition, std::int64_t log_offset, std::optional<std::string> key,
                 std::optional<std::string> value) {
  KafkaMessage m;
  m.topic = "T.pillbox-attempts";
  m.partition = partition;
  m.offset = log_offset;
  m.key = std::move(key);
  m.value = std::move(value);
  return m;
}

// Entries read back in the order given, at log offsets 0, 1, 2...
PartitionAttempts fold(std::int32_t partition, std::int64_t committed, const std::vector<AttemptEntry>& entries) {
  std::vector<KafkaMessage> read;
  for (const AttemptEntry& e : entries) read.push_back(read_back(e, static_cast<std::int64_t>(read.size())));
  return fold_attempt_log(partition, committed, read, static_cast<std::int64_t>(read.size()));
}

AttemptEntry crashed_end(std::int64_t offset, std::uint32_t n, const std::string& fingerprint) {
  return attempt_end(2, offset, recorded_outcome(n, "w" + std::to_string(n), 100 + n, crash(fingerprint), true, false));
}

TEST_CASE("kafka attempts: each entry survives the round trip, keyed partition:offset to its own partition") {
  const AttemptEntry start = attempt_start(2, 40, 3, "host-a:12", 1700000000123);
  const KafkaOutgoing out = attempt_entry_record("orders", start);
  CHECK(out.topic == "orders.pillbox-attempts");
  CHECK(out.partition == 2);
  CHECK(out.key == "2:40");
  const auto j = nlohmann::json::parse(*out.value);
  CHECK(j.at("v") == 1);
  CHECK(j.at("entry") == "start");
  CHECK(j.at("delivery") == 3);

  auto back = parse_attempt_entry(2, out.key, out.value);
  REQUIRE(back.entry.has_value());
  CHECK(back.entry->kind == AttemptEntryKind::kStart);
  CHECK(back.entry->offset == 40);
  CHECK(back.entry->delivery == 3);
  CHECK(back.entry->worker == "host-a:12");
  CHECK(back.entry->at_ms == 1700000000123);

  const AttemptEntry end = crashed_end(40, 3, "pb1-x");
  back = parse_attempt_entry(2, attempt_entry_key(2, 40), attempt_entry_json(end));
  REQUIRE(back.entry.has_value());
  CHECK(back.entry->kind == AttemptEntryKind::kEnd);
  CHECK(back.entry->end.kind == "crash");
  CHECK(back.entry->end.fingerprint == "pb1-x");
  CHECK(back.entry->end.crash_state == std::vector<std::string>{"parse_header", "main"});
  CHECK(back.entry->end.charged);
  // The end's record is delivery_json's, nested: one outcome format.
  CHECK(nlohmann::json::parse(attempt_entry_json(end)).at("record") ==
        nlohmann::json::parse(delivery_json(end.end)));

  const AttemptEntry settled =
      attempt_settled(2, 40, 4, "host-b:7", 5, {KafkaSettlement::How::kDeadLetter, "orders.dlq 2@17"});
  back = parse_attempt_entry(2, attempt_entry_key(2, 40), attempt_entry_json(settled));
  REQUIRE(back.entry.has_value());
  CHECK(back.entry->kind == AttemptEntryKind::kSettled);
  CHECK(back.entry->settlement.how == KafkaSettlement::How::kDeadLetter);
  CHECK(back.entry->settlement.where == "orders.dlq 2@17");
  CHECK(back.entry->delivery == 4);
}

TEST_CASE("kafka attempts: an entry that is not pillbox's is unreadable, with why, never thrown") {
  const std::string good = attempt_entry_json(crashed_end(7, 1, "pb1-x"));
  auto with = [&](const char* name, nlohmann::json value) {
    auto j = nlohmann::json::parse(good);
    if (value.is_discarded()) {
      j.erase(name);
    } else {
      j[name] = std::move(value);
    }
    return j.dump();
  };
  auto record_with = [&](const char* name, nlohmann::json value) {
    auto j = nlohmann::json::parse(good);
    j["record"][name] = std::move(value);
    return j.dump();
  };
  const nlohmann::json gone(nlohmann::json::value_t::discarded);
  const std::string key = "2:7";
  const std::vector<std::pair<std::optional<std::string>, std::optional<std::string>>> hostile = {
      {key, std::nullopt},                                      // a null value
      {key, ""},
      {key, "not json"},
      {key, "[1,2]"},
      {key, std::string(200'000, '[')},                         // deeper than any entry (and too long)
      {key, std::string(kMaxAttemptEntryBytes + 1, ' ')},       // longer than any entry
      {key, std::string(100, '[') + std::string(100, ']')},     // too deep
      {key, with("v", gone)},
      {key, with("v", 2)},                                      // a version this pillbox does not know
      {key, with("v", "1")},
      {key, with("partition", 3)},                              // another partition's, written here
      {key, with("partition", -1)},
      {key, with("offset", 8)},                                 // its key says 7
      {key, with("offset", 1e300)},
      {key, with("delivery", 0)},
      {key, with("delivery", kMaxDeliveries + 1)},
      {key, with("delivery", 1.5)},
      {key, with("delivery", gone)},
      {key, with("entry", "begin")},
      {key, with("entry", 1)},
      {key, with("worker", 12)},
      {key, with("worker", std::string(2000, 'w'))},
      {key, with("at_ms", "soon")},
      {key, with("record", gone)},                              // an end without its record
      {key, with("record", "crash")},
      {key, record_with("kind", "no-such-kind")},
      {key, record_with("kind", 5)},
      {key, record_with("delivery", 2)},                        // the record of another delivery
      {key, attempt_entry_json(attempt_end(2, 7, recorded_start(1, "w", 0)))},  // a start marker as an end
      {key, record_with("signal", 1e300)},
      {std::nullopt, good},                                     // a null key
      {"7", good},
      {"2:07", good},
      {"3:7", good},
      {key, with("entry", "settled")},                          // a settle without how
  };
  for (const auto& [k, v] : hostile) {
    const std::string shown = v ? v->substr(0, 200) : "(null)";
    INFO(shown);
    ParsedAttemptEntry parsed;
    CHECK_NOTHROW(parsed = parse_attempt_entry(2, k, v));
    CHECK_FALSE(parsed.entry.has_value());
    CHECK_FALSE(parsed.why_not.empty());
  }
  auto settled = nlohmann::json::parse(attempt_entry_json(attempt_settled(2, 7, 1, "w", 0, {})));
  for (const nlohmann::json& how : {nlohmann::json("maybe"), nlohmann::json(1), nlohmann::json(nullptr)}) {
    settled["how"] = how;
    CHECK_FALSE(parse_attempt_entry(2, key, settled.dump()).entry.has_value());
  }
  settled["how"] = "ok";
  settled["where"] = std::string(5000, 'x');
  CHECK_FALSE(parse_attempt_entry(2, key, settled.dump()).entry.has_value());
  CHECK(parse_attempt_entry(2, key, good).entry.has_value());  // the control
}

TEST_CASE("kafka attempts: a start without an end never reported back, and counts; the next delivery is one more") {
  // Three workers took record 5 and died running it: three starts, no end.
  const auto p = fold(2, 0, {attempt_start(2, 5, 1, "a", 1), attempt_start(2, 5, 2, "b", 2),
                             attempt_start(2, 5, 3, "c", 3)});
  const RecordAttempts* r = p.find(5);
  REQUIRE(r != nullptr);
  CHECK(next_delivery(*r) == 4);
  const EntryHistory h = record_history(*r);
  CHECK(h.lost == std::vector<std::uint32_t>{1, 2, 3});
  REQUIRE(h.lost_starts.size() == 3);  // the workers that died with it are named
  CHECK(h.lost_starts[2].worker == "c");
  CHECK(h.recorded.empty());
  CHECK(h.last_lost);  // the fourth runs alone
  // Whichever worker gets it next: max_attempts deliveries lost, it kills workers.
  CHECK(h.lost.size() >= RetrySettings{}.max_attempts);
  const auto attempts = engine_history(h, next_delivery(*r));
  REQUIRE(attempts.size() == 1);
  CHECK(attempts[0].n == 3);
  CHECK_FALSE(attempts[0].finished);

  // A record delivered and never started has no entry: nothing to count.
  CHECK(p.find(6) == nullptr);
}

TEST_CASE("kafka attempts: after a lost delivery the next is a suspect's; its end ends the suspicion") {
  // 1 began and never reported back; 2 (a suspect's, run alone) crashed.
  auto p = fold(2, 0, {attempt_start(2, 9, 1, "a", 1), attempt_start(2, 9, 2, "b", 2), crashed_end(9, 2, "pb1-x")});
  EntryHistory h = record_history(*p.find(9));
  CHECK(h.lost == std::vector<std::uint32_t>{1});
  REQUIRE(h.recorded.size() == 1);
  CHECK(h.recorded[0].delivery == 2);
  CHECK(h.recorded[0].kind == "crash");
  CHECK_FALSE(h.last_lost);
  auto attempts = engine_history(h, 3);
  REQUIRE(attempts.size() == 1);
  CHECK(attempts[0].charged);
  // The same crash a second time: the retry policy quarantines it.
  const auto now = recorded_outcome(3, "c", 0, crash("pb1-x"), true, false);
  attempts.push_back({.n = 3, .finished = true, .kind = now.kind, .fingerprint = now.fingerprint, .charged = true});
  CHECK(judge(RetrySettings{}, attempts, crash("pb1-x")).decision == Decision::kQuarantine);

  // An end written before its start in the log (two producers) still ends it.
  p = fold(2, 0, {crashed_end(9, 1, "pb1-x"), attempt_start(2, 9, 1, "a", 1)});
  h = record_history(*p.find(9));
  CHECK(h.lost.empty());
  CHECK(h.recorded.size() == 1);
}

TEST_CASE("kafka attempts: a release (partition revoked) is recorded uncharged, not an attempt") {
  const auto released = recorded_release(1, "a", 10, "released: partition revoked");
  const auto p = fold(2, 0, {attempt_start(2, 3, 1, "a", 1), attempt_end(2, 3, released)});
  const RecordAttempts& r = *p.find(3);
  CHECK(next_delivery(r) == 2);
  const EntryHistory h = record_history(r);
  CHECK(h.lost.empty());
  CHECK_FALSE(h.last_lost);
  REQUIRE(h.recorded.size() == 1);
  CHECK_FALSE(h.recorded[0].charged);
  CHECK(h.recorded[0].note == "released: partition revoked");
  CHECK(engine_history(h, 2).empty());
}

TEST_CASE("kafka attempts: a settled record is known as settled, how and where; the first settle holds") {
  const KafkaSettlement ok{KafkaSettlement::How::kOk, "T.results 2@88"};
  const KafkaSettlement dlq{KafkaSettlement::How::kDeadLetter, "T.dlq 2@3"};
  auto p = fold(2, 0, {attempt_start(2, 4, 1, "a", 1),
                       attempt_end(2, 4, recorded_outcome(1, "a", 2, Outcome{}, false, false)),
                       attempt_settled(2, 4, 1, "a", 3, ok), attempt_settled(2, 4, 1, "z", 4, dlq),
                       attempt_start(2, 5, 1, "a", 5)});
  const RecordAttempts& r = *p.find(4);
  REQUIRE(r.settled.has_value());
  CHECK(r.settled->settlement.how == KafkaSettlement::How::kOk);
  CHECK(r.settled->settlement.where == "T.results 2@88");
  CHECK(r.settled->worker == "a");
  CHECK(r.conflicting == 1);
  CHECK_FALSE(p.find(5)->settled.has_value());
}

TEST_CASE("kafka attempts: two ends of one delivery: the first holds, the other is counted") {
  const auto released = recorded_release(1, "zombie", 10, "released: partition revoked");
  const auto p = fold(2, 0, {attempt_start(2, 3, 1, "a", 1), crashed_end(3, 1, "pb1-x"), attempt_end(2, 3, released)});
  const RecordAttempts& r = *p.find(3);
  CHECK(r.conflicting == 1);
  const EntryHistory h = record_history(r);
  REQUIRE(h.recorded.size() == 1);
  CHECK(h.recorded[0].kind == "crash");
}

TEST_CASE("kafka attempts: unreadable entries are counted and said, the rest is folded") {
  std::vector<KafkaMessage> read = {raw(2, 0, "2:1", "garbage"), read_back(attempt_start(2, 1, 1, "a", 1), 1),
                                    raw(2, 2, std::nullopt, std::nullopt),
                                    read_back(attempt_start(2, 1, 2, "a", 1), 3),
                                    // Written to partition 2 about partition 0's record: not read.
                                    read_back(attempt_start(0, 1, 7, "x", 1), 4)};
  const auto p = fold_attempt_log(2, 0, read, 5);
  CHECK(p.unreadable == 3);
  CHECK(p.first_unreadable.starts_with("attempt-log offset 0: "));
  REQUIRE(p.find(1) != nullptr);
  CHECK(next_delivery(*p.find(1)) == 3);  // the foreign entry's 7 not among them
  CHECK(p.log_end == 5);
}

TEST_CASE("kafka attempts: a forged delivery number counts no more than a missing delivery would") {
  // An entry claiming delivery 9000 of a record that never ran: 1..8999
  // have no entry, so never began (kUnstarted): the first counts as lost,
  // as a delivery before the log was read would, and the forged start.
  const auto p = fold(2, 0, {attempt_start(2, 11, 9000, "forger", 1)});
  const RecordAttempts& r = *p.find(11);
  CHECK(next_delivery(r) == 9001);
  const EntryHistory h = record_history(r);
  CHECK(h.lost == std::vector<std::uint32_t>{1, 9000});
  CHECK(h.unstarted.size() == 8998);
  CHECK(h.lost.size() < RetrySettings{}.max_attempts);
}

TEST_CASE("kafka attempts: entries about records past T's end are no worker's, and hold no commit back") {
  // T's partition ends at 5 when the log is read: a settle of record 7 (not
  // yet produced) would skip it once produced; a start of 900 would keep
  // the commit's N at its log offset for ever.
  const std::vector<KafkaMessage> read = {
      read_back(attempt_settled(2, 7, 1, "forger", 1, {KafkaSettlement::How::kOk, ""}), 0),
      read_back(attempt_start(2, 900, 1, "forger", 1), 1), read_back(attempt_start(2, 4, 1, "a", 1), 2)};
  const auto p = fold_attempt_log(2, 0, read, 3, /*source_end=*/5);
  CHECK(p.unreadable == 2);
  CHECK(p.first_unreadable.find("past the partition's end (5)") != std::string::npos);
  CHECK(p.find(7) == nullptr);
  CHECK(p.find(900) == nullptr);
  REQUIRE(p.find(4) != nullptr);
  CHECK(attempt_log_commit_offset(p, 5) == 3);  // nothing from 5 on: the log's end
}

TEST_CASE("kafka attempts: gaps between entries are forged, never charged") {
  // Retention removes the log's oldest entries: only deliveries before the
  // first entry kept can be missing. Releases (uncharged) written by hand
  // at 2, 4 and 6 leave gaps at 3 and 5 that no worker made: not lost.
  RecordedDelivery release = recorded_release(2, "forger", 1, "released: partition revoked");
  std::vector<AttemptEntry> forged;
  for (std::uint32_t n : {2u, 4u, 6u}) {
    release.delivery = n;
    forged.push_back(attempt_end(2, 11, release));
  }
  const auto p = fold(2, 0, forged);
  const EntryHistory h = record_history(*p.find(11));
  CHECK(h.lost == std::vector<std::uint32_t>{1});  // before the first entry kept: retention's, at most one
  CHECK(h.unstarted == std::vector<std::uint32_t>{3, 5});
  CHECK(h.lost.size() < RetrySettings{}.max_attempts);
  CHECK(!h.last_lost);
}

TEST_CASE("kafka attempts: entries of records before the committed offset are left out, and forgotten after a commit") {
  auto p = fold(2, 10, {attempt_start(2, 8, 1, "a", 1), attempt_start(2, 10, 1, "a", 1),
                        attempt_start(2, 12, 1, "a", 1)});
  CHECK(p.older == 1);
  CHECK(p.find(8) == nullptr);
  CHECK(p.find(10) != nullptr);
  p.forget_below(11);
  CHECK(p.find(10) == nullptr);
  CHECK(p.find(12) != nullptr);
  p.add(attempt_start(2, 10, 2, "late", 1), 40);  // about a record now committed
  CHECK(p.find(10) == nullptr);
  CHECK(p.older == 2);
  CHECK(p.log_end == 41);
}

TEST_CASE("kafka attempts: the commit's N is the first entry of the records from the committed offset on") {
  // Log offsets: 0 r5, 1 r7, 2 r6, 3 r5 end, 4 r7.
  auto p = fold(2, 0, {attempt_start(2, 5, 1, "a", 1), attempt_start(2, 7, 1, "a", 1), attempt_start(2, 6, 1, "a", 1),
                       crashed_end(5, 1, "pb1-x"), crashed_end(7, 1, "pb1-y")});
  CHECK(attempt_log_commit_offset(p, 0) == 0);
  CHECK(attempt_log_commit_offset(p, 5) == 0);
  CHECK(attempt_log_commit_offset(p, 6) == 1);  // 7's first entry comes before 6's
  CHECK(attempt_log_commit_offset(p, 7) == 1);
  // Nothing about offsets from 8 on: the log's end; what is written about them comes after it.
  CHECK(attempt_log_commit_offset(p, 8) == 5);
  // What the worker writes itself counts (its delivery report's offset).
  p.add(attempt_start(2, 9, 1, "me", 1), 12);
  CHECK(attempt_log_commit_offset(p, 8) == 12);
  CHECK(p.log_end == 13);
  p.forget_below(8);
  CHECK(attempt_log_commit_offset(p, 8) == 12);
  CHECK(attempt_log_commit_offset(p, 10) == 13);
}

TEST_CASE("kafka attempts: commit metadata: pillbox-attempts@N, anything else reads the log from its beginning") {
  CHECK(attempt_commit_metadata(1234) == "pillbox-attempts@1234");
  auto start = parse_attempt_commit_metadata(attempt_commit_metadata(1234));
  CHECK(start.from == 1234);
  CHECK(start.why_beginning.empty());
  CHECK(parse_attempt_commit_metadata("pillbox-attempts@0").from == 0);
  CHECK(parse_attempt_commit_metadata("pillbox-attempts@9223372036854775807").from == INT64_MAX);
  const std::string binary("pillbox-attempts@\x00\xff\n1", 21);
  for (const std::string& other :
       {std::string(), std::string("pillbox-attempts@"), std::string("pillbox-attempts@-1"),
        std::string("pillbox-attempts@+1"), std::string("pillbox-attempts@ 1"), std::string("pillbox-attempts@1 "),
        std::string("pillbox-attempts@1x"), std::string("pillbox-attempts@9223372036854775808"),
        std::string("pillbox-attempts@1e3"), std::string("Pillbox-attempts@1"), std::string("checkpoint 17"),
        std::string(5000, 'm'), binary}) {
    INFO(other.substr(0, 80));
    AttemptLogStart s;
    CHECK_NOTHROW(s = parse_attempt_commit_metadata(other));
    CHECK_FALSE(s.from.has_value());
    CHECK(s.why_beginning.find("read from its beginning") != std::string::npos);
    CHECK(s.why_beginning.size() < 400);  // another client's metadata is shown cut
    CHECK(s.why_beginning.find('\n') == std::string::npos);
  }
}

}  // namespace

TEST_CASE("kafka attempts: two groups reading one topic share its log and count only their own entries") {
  AttemptEntry mine = attempt_start(0, 5, 1, "w1", 1);
  mine.group = "billing";
  AttemptEntry theirs = attempt_start(0, 5, 1, "w9", 1);
  theirs.group = "search";
  AttemptEntry theirs_settled = attempt_settled(0, 6, 1, "w9", 2, KafkaSettlement{});
  theirs_settled.group = "search";
  const std::vector<KafkaMessage> read = {read_back(theirs, 0), read_back(mine, 1), read_back(theirs_settled, 2)};
  const PartitionAttempts p = fold_attempt_log(0, 0, read, 3, std::numeric_limits<std::int64_t>::max(), "billing");
  CHECK(p.other_groups == 2);
  CHECK(p.unreadable == 0);
  REQUIRE(p.find(5) != nullptr);
  CHECK(next_delivery(*p.find(5)) == 2);  // its own start only
  CHECK(p.find(6) == nullptr);             // settled in the other group: not here
  CHECK(p.log_end == 3);
}
