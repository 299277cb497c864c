// Attacks on the helpers the "written once" refactors introduced: the shared
// stream-reply readers (supervisor/broker/stream_reply.h: stream_entries,
// field_pairs, entry_field), the replay brakes (supervisor/ops/replay_tally.h)
// and the JSON whole-number reader (supervisor/io/untrusted_json.h). Replies
// are hiredis's own trees, parsed from RESP bytes by hiredis's reader, as a
// server would send them; one tree is built by hand for the null pointers
// hiredis's reader never makes. Pure: no Redis.
#include <doctest/doctest.h>

#include <hiredis/hiredis.h>

#include <chrono>
#include <cstddef>
#include <limits>
#include <nlohmann/json.hpp>
#include <string>
#include <string_view>
#include <vector>

#include "supervisor/broker/redis_connection.h"
#include "supervisor/broker/stream_reply.h"
#include "supervisor/io/untrusted_json.h"
#include "supervisor/ops/replay_tally.h"

namespace {

using namespace pillbox;
using namespace pillbox::broker;

// RESP2, as a server writes it.
std::string bulk(std::string_view s) { return "$" + std::to_string(s.size()) + "\r\n" + std::string(s) + "\r\n"; }
std::string arr(std::size_t n) { return "*" + std::to_string(n) + "\r\n"; }
std::string integer(long long v) { return ":" + std::to_string(v) + "\r\n"; }
const std::string kNil = "$-1\r\n";
const std::string kNilArray = "*-1\r\n";

// A flat array of bulk strings.
std::string bulks(const std::vector<std::string>& items) {
  std::string out = arr(items.size());
  for (const auto& s : items) out += bulk(s);
  return out;
}

// {id, {name, value, ...}}: an entry as XRANGE returns it.
std::string entry(std::string_view id, const std::vector<std::string>& fields) { return arr(2) + bulk(id) + bulks(fields); }

// One whole reply of `resp`, read by hiredis's reader; nothing may be left over.
RedisReply parse(const std::string& resp) {
  redisReader* reader = redisReaderCreate();
  REQUIRE(reader != nullptr);
  const int fed = redisReaderFeed(reader, resp.data(), resp.size());
  void* out = nullptr;
  const int got = fed == REDIS_OK ? redisReaderGetReply(reader, &out) : REDIS_ERR;
  void* extra = nullptr;
  const int more = got == REDIS_OK && out != nullptr ? redisReaderGetReply(reader, &extra) : REDIS_ERR;
  redisReaderFree(reader);
  if (extra != nullptr) freeReplyObject(extra);
  RedisReply reply(static_cast<redisReply*>(out));
  REQUIRE(fed == REDIS_OK);
  REQUIRE(got == REDIS_OK);
  REQUIRE(reply != nullptr);
  REQUIRE(more == REDIS_OK);
  REQUIRE(extra == nullptr);  // the test's bytes are exactly one reply
  return reply;
}

std::vector<std::string> ids_of(const std::vector<StreamEntry>& entries) {
  std::vector<std::string> out;
  for (const auto& e : entries) out.push_back(e.id);
  return out;
}

using Ids = std::vector<std::string>;

TEST_CASE("stream reply: a well-formed XRANGE reply reads back id for id, its fields in order, a repeated name kept") {
  const RedisReply top = parse(arr(2) + entry("1-0", {"key", "k", "payload", "p1", "payload", "p2"}) +
                               entry("2-0", {"payload", ""}));
  const auto entries = stream_entries(top.get(), 2);
  REQUIRE(entries.size() == 2);
  CHECK(entries[0].id == "1-0");
  CHECK(entries[0].fields == EntryFields{{"key", "k"}, {"payload", "p1"}, {"payload", "p2"}});
  CHECK(entries[0].fields_listed);
  CHECK(entries[0].reply == top->element[0]);
  // The first of a repeated name is the one read (the worker refuses the entry; readers agree on which).
  REQUIRE(entry_field(entries[0].fields, "payload") != nullptr);
  CHECK(*entry_field(entries[0].fields, "payload") == "p1");
  // An empty value is there, an absent one is not.
  REQUIRE(entry_field(entries[1].fields, "payload") != nullptr);
  CHECK(entry_field(entries[1].fields, "payload")->empty());
  CHECK(entry_field(entries[1].fields, "key") == nullptr);
  CHECK(field_or_empty(entries[1].fields, "key").empty());
  CHECK(entries[1].reply == top->element[1]);
}

TEST_CASE("stream reply: elements of the list that are not entries are skipped, the others kept with their own element") {
  const std::string list = arr(9) + kNil + integer(7) + "+OK\r\n" + "-ERR forged\r\n" + kNilArray + arr(0) +
                           (arr(1) + bulk("9-0")) + entry("3-0", {"a", "b"}) +
                           (arr(3) + bulk("4-0") + bulks({"c", "d"}) + bulk("extra"));
  const RedisReply top = parse(list);
  REQUIRE(top->elements == 9);

  SUBCASE("exactly 2 elements (XRANGE, XREADGROUP, the redrive's XREAD)") {
    const auto entries = stream_entries(top.get(), 2);
    CHECK(ids_of(entries) == Ids{"3-0"});
    REQUIRE(entries.size() == 1);
    CHECK(entries[0].fields == EntryFields{{"a", "b"}});
    // The entry's own element, not element[0] of the list: a caller reading
    // what a script adds must not read it from the list by the entry's place.
    CHECK(entries[0].reply == top->element[7]);
  }
  SUBCASE("2 or more (the dead-letter page script adds two elements to each)") {
    const auto entries = stream_entries(top.get(), 2, /*or_more=*/true);
    CHECK(ids_of(entries) == Ids{"3-0", "4-0"});
    REQUIRE(entries.size() == 2);
    CHECK(entries[1].reply == top->element[8]);
    CHECK(entries[1].reply->elements == 3);  // or_more: a caller reading element[3] must check this itself
    CHECK(entries[1].fields == EntryFields{{"c", "d"}});
  }
}

TEST_CASE("stream reply: an entry whose fields element is no array is still an entry, with no fields, not listed") {
  // {id, nil} is how XREADGROUP/XCLAIM return an entry deleted while pending.
  const RedisReply top = parse(arr(6) + (arr(2) + bulk("1-0") + kNil) + (arr(2) + bulk("2-0") + integer(5)) +
                               (arr(2) + bulk("3-0") + "+OK\r\n") + (arr(2) + bulk("4-0") + kNilArray) +
                               (arr(2) + bulk("5-0") + arr(0)) + (arr(2) + bulk("6-0") + "-ERR x\r\n"));
  const auto entries = stream_entries(top.get(), 2);
  // Kept: read_new dead-letters it as having no payload; entry_at and the
  // redrive tell it apart by fields_listed.
  CHECK(ids_of(entries) == Ids{"1-0", "2-0", "3-0", "4-0", "5-0", "6-0"});
  REQUIRE(entries.size() == 6);
  for (const auto& e : entries) {
    CAPTURE(e.id);
    CHECK(e.fields.empty());
    CHECK(e.fields_listed == (e.id == "5-0"));  // only an (empty) array is a listed entry
  }
}

TEST_CASE("stream reply: an odd field count drops the trailing name; values that are not strings read as their text or \"\"") {
  const std::string odd = entry("1-0", {"key", "k", "payload"});
  const std::string mixed = arr(2) + bulk("2-0") + arr(8) + bulk("payload") + integer(42) + bulk("key") + kNil +
                            (arr(1) + bulk("n")) + bulk("x") + "+st\r\n" + "-ERR boom\r\n";
  const RedisReply top = parse(arr(2) + odd + mixed);
  const auto entries = stream_entries(top.get(), 2);
  REQUIRE(entries.size() == 2);
  CHECK(entries[0].fields == EntryFields{{"key", "k"}});
  CHECK(entry_field(entries[0].fields, "payload") == nullptr);  // "no payload field", never a guessed ""
  // An integer payload is a payload of "" (present), a nested name is "",
  // a status or error reply is its text.
  CHECK(entries[1].fields ==
        EntryFields{{"payload", ""}, {"key", ""}, {"", "x"}, {"st", "ERR boom"}});
  REQUIRE(entry_field(entries[1].fields, "payload") != nullptr);
}

TEST_CASE("stream reply: the claim script's 4-element entries, exact: 3 and 5 elements are skipped") {
  const std::string four = arr(4) + bulk("1-0") + bulks({"payload", "p"}) + integer(3) + bulks({"1", "{}"});
  const std::string three = arr(3) + bulk("2-0") + bulks({"payload", "p"}) + integer(2);
  const std::string five = arr(5) + bulk("3-0") + bulks({"payload", "p"}) + integer(1) + bulks({}) + bulk("x");
  const std::string two = entry("4-0", {"payload", "p"});
  const RedisReply top = parse(arr(4) + four + three + five + two);

  const auto exact = stream_entries(top.get(), 4);
  CHECK(ids_of(exact) == Ids{"1-0"});
  REQUIRE(exact.size() == 1);
  // Elements [2] and [3] exist on every entry returned: claim_idle reads them.
  REQUIRE(exact[0].reply->elements == 4);
  CHECK(exact[0].reply->element[2]->integer == 3);
  CHECK(field_pairs(exact[0].reply->element[3]) == EntryFields{{"1", "{}"}});

  CHECK(ids_of(stream_entries(top.get(), 4, /*or_more=*/true)) == Ids{"1-0", "3-0"});
  CHECK(ids_of(stream_entries(top.get(), 2)) == Ids{"4-0"});
  CHECK(ids_of(stream_entries(top.get(), 2, /*or_more=*/true)) == Ids{"1-0", "2-0", "3-0", "4-0"});
}

TEST_CASE("stream reply: a list that is no array is no entries, and field_pairs of a non-array is no pairs") {
  for (const std::string& resp : {kNil, kNilArray, integer(1), std::string("+OK\r\n"), std::string("-ERR x\r\n"),
                                  bulk("1-0"), arr(0)}) {
    CAPTURE(resp);
    const RedisReply r = parse(resp);
    CHECK(stream_entries(r.get(), 2).empty());
    CHECK(stream_entries(r.get(), 2, /*or_more=*/true).empty());
    CHECK(field_pairs(r.get()).empty());
  }
  CHECK(stream_entries(nullptr, 2).empty());
  CHECK(field_pairs(nullptr).empty());
}

TEST_CASE("stream reply: a nil or integer id reads as \"\" and the entry is kept") {
  const RedisReply top = parse(arr(2) + (arr(2) + kNil + bulks({"payload", "p"})) +
                               (arr(2) + integer(12) + bulks({"payload", "q"})));
  const auto entries = stream_entries(top.get(), 2);
  CHECK(ids_of(entries) == Ids{"", ""});
  REQUIRE(entries.size() == 2);
  CHECK(entries[1].fields == EntryFields{{"payload", "q"}});
}

TEST_CASE("stream reply: null element pointers (a hand-built tree) read as empty text, in an id or a field") {
  // hiredis's reader never makes them (a nil is a REDIS_REPLY_NIL object);
  // reply_text's nullptr check is what keeps these from crashing.
  char a[] = "a";
  char b[] = "b";
  redisReply ra{}, rb{};
  ra.type = rb.type = REDIS_REPLY_STRING;
  ra.str = a;
  ra.len = 1;
  rb.str = b;
  rb.len = 1;
  redisReply* field_items[] = {&ra, nullptr, nullptr, &rb};
  redisReply fields{};
  fields.type = REDIS_REPLY_ARRAY;
  fields.elements = 4;
  fields.element = field_items;
  CHECK(field_pairs(&fields) == EntryFields{{"a", ""}, {"", "b"}});

  redisReply* entry_items[] = {nullptr, &fields};
  redisReply e{};
  e.type = REDIS_REPLY_ARRAY;
  e.elements = 2;
  e.element = entry_items;
  redisReply* list_items[] = {&e};
  redisReply list{};
  list.type = REDIS_REPLY_ARRAY;
  list.elements = 1;
  list.element = list_items;
  const auto entries = stream_entries(&list, 2);
  REQUIRE(entries.size() == 1);
  CHECK(entries[0].id.empty());
  CHECK(entries[0].fields_listed);
  CHECK(entries[0].fields == EntryFields{{"a", ""}, {"", "b"}});
  CHECK(entries[0].reply == &e);
}

TEST_CASE("stream reply: many entries, every other one malformed: each kept one points at its own element") {
  constexpr std::size_t kPairs = 2000;
  std::string resp = arr(2 * kPairs);
  for (std::size_t i = 0; i < kPairs; ++i) {
    resp += integer(static_cast<long long>(i)) + entry(std::to_string(i) + "-0", {"n", std::to_string(i)});
  }
  const RedisReply top = parse(resp);
  const auto entries = stream_entries(top.get(), 2);
  REQUIRE(entries.size() == kPairs);
  bool all_match = true;
  for (std::size_t i = 0; i < kPairs; ++i) {
    all_match = all_match && entries[i].reply == top->element[2 * i + 1] && entries[i].id == std::to_string(i) + "-0" &&
                entries[i].fields == EntryFields{{"n", std::to_string(i)}};
  }
  CHECK(all_match);
}

TEST_CASE("stream reply: entry_field's non-const overload gives the stored value itself") {
  EntryFields fields{{"payload", "a"}, {"payload", "b"}};
  std::string* v = entry_field(fields, "payload");
  REQUIRE(v != nullptr);
  *v = "changed";
  CHECK(fields == EntryFields{{"payload", "changed"}, {"payload", "b"}});
  CHECK(entry_field(fields, "Payload") == nullptr);  // names are exact, case and all
}

// ---- the brakes (replay_tally.h), shared by the store's replay and the fleet's redrive ----

Outcome failed(Kind kind, std::string fingerprint) {
  Outcome o;
  o.kind = kind;
  o.fingerprint = std::move(fingerprint);
  return o;
}

TEST_CASE("replay tally: counts by fingerprint (the kind when there is none), then the progress") {
  ReplayBrakes brakes;
  ReplayResult result;
  result.selected = 5;
  std::vector<std::pair<std::size_t, std::size_t>> progress;
  ReplayTally tally(brakes, result, [&](std::size_t done, std::size_t total) {
    // Told after the counts moved.
    CHECK(done == result.replayed);
    progress.emplace_back(done, total);
  });
  tally.count(store::ReplayVerdict::kFailedAgain, failed(Kind::kCrash, "pb1-x"));
  tally.count(store::ReplayVerdict::kFailedAgain, failed(Kind::kOom, ""));
  tally.count(store::ReplayVerdict::kResolved, failed(Kind::kOk, ""));
  tally.count(store::ReplayVerdict::kFailedAgain, failed(Kind::kCrash, "pb1-x"));
  CHECK(result.replayed == 4);
  CHECK(result.resolved == 1);
  CHECK(result.failed_again == 3);
  CHECK(result.failures_by_fingerprint == std::map<std::string, std::size_t>{{"oom", 1}, {"pb1-x", 2}});
  CHECK(progress == std::vector<std::pair<std::size_t, std::size_t>>{{1, 5}, {2, 5}, {3, 5}, {4, 5}});
}

TEST_CASE("replay tally: --stop-after K bounds what is in flight and names the first fingerprint at K") {
  ReplayBrakes brakes;
  ReplayResult result;
  SUBCASE("without K: no bound, never a reason") {
    ReplayTally tally(brakes, result, nullptr);
    for (int i = 0; i < 50; ++i) tally.count(store::ReplayVerdict::kFailedAgain, failed(Kind::kCrash, "pb1-a"));
    CHECK(tally.room() == std::numeric_limits<std::size_t>::max());
    CHECK(tally.stop_after_reason().empty());
  }
  SUBCASE("K = 3: room is K minus the worst, one fingerprint's failures never pooled with another's") {
    brakes.stop_after = 3;
    ReplayTally tally(brakes, result, nullptr);
    CHECK(tally.room() == 3);
    tally.count(store::ReplayVerdict::kFailedAgain, failed(Kind::kCrash, "pb1-b"));
    tally.count(store::ReplayVerdict::kFailedAgain, failed(Kind::kCrash, "pb1-a"));
    tally.count(store::ReplayVerdict::kFailedAgain, failed(Kind::kCrash, "pb1-b"));
    CHECK(tally.room() == 1);
    CHECK(tally.stop_after_reason().empty());
    tally.count(store::ReplayVerdict::kFailedAgain, failed(Kind::kCrash, "pb1-b"));
    CHECK(tally.room() == 0);
    CHECK(tally.stop_after_reason() == "3 replayed payloads failed again with pb1-b (--stop-after 3)");
    // Over K (an earlier replay's outcomes counted at once): still 0, not a wrapped size_t.
    tally.count(store::ReplayVerdict::kFailedAgain, failed(Kind::kCrash, "pb1-b"));
    CHECK(tally.room() == 0);
  }
  SUBCASE("two fingerprints at K (the fleet's adopted outcomes): the first by name") {
    brakes.stop_after = 1;
    ReplayTally tally(brakes, result, nullptr);
    tally.count(store::ReplayVerdict::kFailedAgain, failed(Kind::kCrash, "pb1-z"));
    tally.count(store::ReplayVerdict::kFailedAgain, failed(Kind::kCrash, "pb1-a"));
    CHECK(tally.stop_after_reason() == "1 replayed payloads failed again with pb1-a (--stop-after 1)");
  }
}

TEST_CASE("replay tally: --max-failure-ratio stops only when more than that share of a batch failed") {
  ReplayBrakes brakes;
  ReplayResult result;
  SUBCASE("the default 1.0 never stops") {
    ReplayTally tally(brakes, result, nullptr);
    CHECK(tally.failure_ratio_reason(3, 3).empty());
  }
  SUBCASE("0.5") {
    brakes.max_failure_ratio = 0.5;
    ReplayTally tally(brakes, result, nullptr);
    CHECK(tally.failure_ratio_reason(1, 2).empty());  // equal is not more
    CHECK(tally.failure_ratio_reason(0, 0).empty());  // nothing ran
    CHECK(tally.failure_ratio_reason(2, 3) ==
          "2 of 3 payloads of a batch failed again (more than --max-failure-ratio 0.50)");
  }
  SUBCASE("0: one failure is too many") {
    brakes.max_failure_ratio = 0;
    ReplayTally tally(brakes, result, nullptr);
    CHECK(tally.failure_ratio_reason(0, 4).empty());
    CHECK(tally.failure_ratio_reason(1, 4) ==
          "1 of 4 payloads of a batch failed again (more than --max-failure-ratio 0.00)");
  }
}

TEST_CASE("replay tally: --rate paces starts from the previous turn, not from now; a batch is at least 1") {
  ReplayBrakes brakes;
  ReplayResult result;
  SUBCASE("no rate: never waits") {
    brakes.batch = 0;
    ReplayTally tally(brakes, result, nullptr);
    CHECK(tally.batch_size() == 1);
    tally.take_turn();
    tally.take_turn();
    CHECK_FALSE(tally.not_before().has_value());
  }
  SUBCASE("0.1 a second: the first start is now, each next 10 s after the one before") {
    brakes.rate = 0.1;
    ReplayTally tally(brakes, result, nullptr);
    CHECK_FALSE(tally.not_before().has_value());
    const auto before = ReplayTally::Clock::now();
    tally.take_turn();
    tally.take_turn();
    const auto next = tally.not_before();
    REQUIRE(next.has_value());
    // Two turns: 20 s on, 10 s more than one turn (or a turn counted from now) would give.
    CHECK(*next - before >= std::chrono::seconds(20));
    CHECK(*next - ReplayTally::Clock::now() > std::chrono::seconds(15));
  }
}

// ---- the one JSON whole-number reader ----

TEST_CASE("untrusted json: a whole number that fits an int64, nothing else") {
  using nlohmann::json;
  CHECK(json_whole_number(json(-5)) == std::optional<std::int64_t>(-5));
  CHECK(json_whole_number(json(std::numeric_limits<std::int64_t>::max())) ==
        std::optional<std::int64_t>(std::numeric_limits<std::int64_t>::max()));
  CHECK(json_whole_number(json(std::numeric_limits<std::int64_t>::min())) ==
        std::optional<std::int64_t>(std::numeric_limits<std::int64_t>::min()));
  CHECK_FALSE(json_whole_number(json::parse("9223372036854775808")).has_value());  // one past int64
  CHECK_FALSE(json_whole_number(json::parse("18446744073709551615")).has_value());
  CHECK_FALSE(json_whole_number(json::parse("1e300")).has_value());  // converting it is undefined behaviour
  CHECK_FALSE(json_whole_number(json::parse("1.0")).has_value());
  CHECK_FALSE(json_whole_number(json(nullptr)).has_value());
  CHECK_FALSE(json_whole_number(json(true)).has_value());
  CHECK_FALSE(json_whole_number(json("5")).has_value());
}

}  // namespace
