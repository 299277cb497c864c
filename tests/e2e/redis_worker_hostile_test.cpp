// pillbox worker attacked through Redis: every stream entry, every key under
// NAME:, the consumer group and the other consumers may be hostile
// (docs/distributed.md). None of it may crash, hang or mislead the worker, or
// block the stream: a bad entry is dead-lettered as protocol-error and the
// worker goes on; a bad key every settle needs (NAME:results, NAME:dlq, the
// group) stops the worker with one clear line, what it held left pending.
// Workers are real `pillbox worker` processes on a real redis-server; tasks
// run the mixed_poison fixture (S: SIGSEGV, A: abort, L: spins, E: handler
// error, else echo) or /bin/sh when a task must take a while.
#include <doctest/doctest.h>
#include <signal.h>

#include <algorithm>
#include <nlohmann/json.hpp>
#include <set>
#include <string>
#include <vector>

#include "tests/e2e/background.h"
#include "tests/e2e/redis_server.h"
#include "tests/e2e/support.h"

namespace {

using e2e::pending_on;
using e2e::run_pillbox;
using nlohmann::json;
using pillbox::broker::reply_text;

// One command that must succeed; its reply as text ("" for arrays).
std::string must(const e2e::RedisServer& server, const std::vector<std::string>& args) {
  auto redis = e2e::connect(server);
  std::vector<std::string_view> views(args.begin(), args.end());
  auto r = redis.command(views);
  REQUIRE_MESSAGE(r.has_value(), (r ? "" : r.error()));
  return reply_text(r->get());
}

// XADD jobs * with exactly these fields (any bytes, any count, duplicates
// kept: a stream entry is what its producer made it). Its id.
std::string add_raw(const e2e::RedisServer& server, const std::vector<std::string>& fields) {
  std::vector<std::string> args = {"XADD", "jobs", "*"};
  args.insert(args.end(), fields.begin(), fields.end());
  return must(server, args);
}

std::string add_task(const e2e::RedisServer& server, const std::string& key, const std::string& payload) {
  return add_raw(server, {"key", key, "payload", payload});
}

void create_group(const e2e::RedisServer& server) { must(server, {"XGROUP", "CREATE", "jobs", "pillbox", "0", "MKSTREAM"}); }

// Delivers every new entry to a consumer that never reports back (`ghost`),
// so that a worker with a short --claim-idle takes them over at delivery 2
// and reads their history.
void deliver_to_ghost(const e2e::RedisServer& server) {
  must(server, {"XREADGROUP", "GROUP", "pillbox", "ghost", "COUNT", "100000", "STREAMS", "jobs", ">"});
}

std::vector<std::string> worker_args(const e2e::RedisServer& server, const std::vector<std::string>& extra) {
  std::vector<std::string> args = {"worker", "--redis", server.url(), "--stream", "jobs"};
  if (std::find(extra.begin(), extra.end(), "--backoff-base") == extra.end()) {
    args.insert(args.end(), {"--backoff-base", "10ms"});
  }
  args.insert(args.end(), extra.begin(), extra.end());
  args.insert(args.end(), {"--", e2e::fixture("mixed_poison")});
  return args;
}

// A worker whose tasks take `seconds` and then echo their payload.
std::vector<std::string> slow_worker_args(const e2e::RedisServer& server, const std::vector<std::string>& extra,
                                          const std::string& seconds) {
  std::vector<std::string> args = {"worker", "--redis", server.url(), "--stream", "jobs"};
  args.insert(args.end(), extra.begin(), extra.end());
  args.insert(args.end(), {"--", "/bin/sh", "-c", "sleep " + seconds + "; cat"});
  return args;
}


// The entries of a stream by their `entry` field (the task's id).
std::map<std::string, std::map<std::string, std::string>> by_entry(const e2e::RedisServer& server,
                                                                   const std::string& stream) {
  std::map<std::string, std::map<std::string, std::string>> out;
  for (auto& e : e2e::stream_entries(server, stream)) {
    const std::string id = e.fields.count("entry") ? e.fields.at("entry") : "";
    CHECK_MESSAGE(out.count(id) == 0, "two entries in " << stream << " for " << id);
    out[id] = std::move(e.fields);
  }
  return out;
}

json record_of(const std::map<std::string, std::string>& dead_letter) {
  auto j = json::parse(dead_letter.at("record"), nullptr, false);
  REQUIRE_FALSE(j.is_discarded());
  return j;
}

// Bytes a terminal would act on: C0 controls but newline, DEL, and C1
// controls (raw or UTF-8 encoded).
bool terminal_safe(const std::string& text) {
  for (std::size_t i = 0; i < text.size(); ++i) {
    const auto c = static_cast<unsigned char>(text[i]);
    if ((c < 0x20 && c != '\n') || c == 0x7f) return false;
    if (c == 0xc2 && i + 1 < text.size() && static_cast<unsigned char>(text[i + 1]) < 0xa0) return false;
  }
  return true;
}

TEST_CASE("worker (hostile): entries of every shape are each settled once; the stream goes on") {
  e2e::RedisServer server;
  REQUIRE_REDIS(server);
  create_group(server);
  const std::string no_fields = add_raw(server, {"nothing", "expected"});
  // Two payloads: which one ran? Whoever reads the entry later (a dict keeps
  // the last) would believe the other: ambiguous, not run.
  const std::string two_payloads = add_raw(server, {"key", "two-payloads", "payload", "harmless", "payload", "S"});
  const std::string two_keys = add_raw(server, {"key", "first-key", "key", "second-key", "payload", "fine"});
  const std::string two_redrives =
      add_raw(server, {"key", "two-redrives", "payload", "fine", "redrive_of", "1-1", "redrive_of", "2-2"});
  const std::string binary_names =
      add_raw(server, {std::string("\xff\x00\x1b[2J", 6), std::string("\x00", 1), "key", "binary-names", "payload", "bin"});
  std::vector<std::string> many;
  for (int i = 0; i < 10'000; ++i) many.insert(many.end(), {"f" + std::to_string(i), std::to_string(i)});
  many.insert(many.end(), {"key", "many-fields", "payload", "many"});
  const std::string many_fields = add_raw(server, many);
  std::string garbage(4096, '\0');
  for (std::size_t i = 0; i < garbage.size(); ++i) garbage[i] = static_cast<char>(i * 7 + 3);
  const std::string redrive = add_raw(server, {"key", "redrive", "payload", "again", "redrive_of", garbage});
  const std::string empty = add_task(server, "empty", "");
  const std::string after = add_task(server, "after", "still runs");

  const auto r = run_pillbox(worker_args(server, {"--jobs", "2", "--exit-when-idle", "1s", "--json"}));
  INFO(r.describe());
  CHECK(r.exit_code == 0);
  const auto results = by_entry(server, "jobs:results");
  const auto dlq = by_entry(server, "jobs:dlq");
  CHECK(results.size() + dlq.size() == 9);
  for (const auto& id : {no_fields, two_payloads, two_keys, two_redrives}) {
    INFO(id);
    REQUIRE(dlq.count(id) == 1);
    CHECK(dlq.at(id).at("kind") == "protocol-error");
    CHECK(record_of(dlq.at(id))["wall_ms"] == 0);  // not run
  }
  CHECK(record_of(dlq.at(two_payloads))["message"].get<std::string>().find("2 `payload` fields") != std::string::npos);
  CHECK(record_of(dlq.at(two_keys))["message"].get<std::string>().find("2 `key` fields") != std::string::npos);
  CHECK(record_of(dlq.at(two_redrives))["message"].get<std::string>().find("2 `redrive_of` fields") != std::string::npos);
  CHECK(dlq.at(two_keys).at("key") == "first-key");
  // Nothing of what the entry held is lost (it is deleted once settled):
  // the first payload is the dead letter's, with its size and hash; the
  // other values go with it.
  CHECK(dlq.at(two_payloads).at("payload") == "harmless");
  CHECK(dlq.at(two_payloads).at("repeated:payload") == "S");
  CHECK(record_of(dlq.at(two_payloads))["payload_size"] == 8);
  CHECK(dlq.at(two_keys).at("repeated:key") == "second-key");
  CHECK(dlq.at(two_keys).at("payload") == "fine");
  CHECK(dlq.at(two_redrives).at("repeated:redrive_of") == "2-2");
  CHECK(record_of(dlq.at(no_fields))["message"] ==
        "stream entry " + no_fields + " has no `payload` field (its fields: nothing; a task entry has `key` and "
        "`payload`, as pillbox submit writes them)");
  CHECK(results.at(binary_names).at("output") == "bin");
  CHECK(results.at(many_fields).at("output") == "many");
  CHECK(results.at(many_fields).size() < 20);  // the entry's fields are not copied
  // A field the worker does not read is carried as it is, byte for byte.
  CHECK(results.at(redrive).at("redrive_of") == garbage);
  CHECK(results.at(empty).at("output") == "");
  CHECK(results.at(after).at("output") == "still runs");
  CHECK(e2e::pending_count(server, "jobs", "pillbox") == 0);
  CHECK(r.records.size() == 9);
}

TEST_CASE("worker (hostile): a payload of exactly --max-payload runs, one byte more is dead-lettered unrun") {
  e2e::RedisServer server;
  REQUIRE_REDIS(server);
  const std::string at = add_task(server, "at-limit", std::string(1024, 'x'));
  const std::string over = add_task(server, "over-limit", std::string(1025, 'x'));
  const auto r = run_pillbox(worker_args(server, {"--max-payload", "1K", "--exit-when-idle", "1s", "--json"}));
  INFO(r.describe());
  CHECK(r.exit_code == 0);
  const auto results = by_entry(server, "jobs:results");
  const auto dlq = by_entry(server, "jobs:dlq");
  REQUIRE(results.count(at) == 1);
  CHECK(results.at(at).at("output") == std::string(1024, 'x'));
  REQUIRE(dlq.count(over) == 1);
  CHECK(dlq.at(over).at("kind") == "protocol-error");
  // Kept whole (it is deleted from the stream), for a redrive with a larger
  // limit; the record says what it is.
  CHECK(dlq.at(over).at("payload") == std::string(1025, 'x'));
  CHECK(record_of(dlq.at(over))["payload_size"] == 1025);
  CHECK(record_of(dlq.at(over))["message"].get<std::string>().find("1025 bytes is over the limit of 1024") !=
        std::string::npos);
}

TEST_CASE("worker (hostile): keys with escape sequences and newlines are printed inert, on every kind of line") {
  e2e::RedisServer server;
  REQUIRE_REDIS(server);
  // OSC (window title), CSI (clear screen), a carriage return and newline
  // that would forge a line of their own, a UTF-8-encoded C1 CSI, BEL.
  const std::string evil = "\x1b]0;owned\x07\x1b[2J\r\nok                fake  (0 ms)\xc2\x9b" "31m\x07";
  const std::string ok = add_task(server, "ok " + evil, "fine");
  const std::string crash = add_task(server, "crash " + evil, "S");
  const std::string malformed = add_raw(server, {"key", "malformed " + evil});
  // The first worker runs the crash once and waits an hour for the retry,
  // holding it; SIGTERM releases it (a "released" line).
  e2e::Background first(e2e::pillbox_binary(),
                        worker_args(server, {"--jobs", "1", "--backoff-base", "1h", "--backoff-max", "1h"}));
  REQUIRE_MESSAGE(e2e::eventually([&] { return e2e::redis_integer(server, {"HLEN", "jobs:attempts:" + crash}) == 1; }),
                  first.err());
  first.signal(SIGTERM);
  CHECK(first.wait() == 143);
  // The second takes it over and dead-letters it.
  const auto second = run_pillbox(worker_args(server, {"--claim-idle", "200ms", "--exit-when-idle", "1500ms"}));
  INFO(second.describe());
  CHECK(second.exit_code == 0);
  CHECK(by_entry(server, "jobs:dlq").count(crash) == 1);
  CHECK(by_entry(server, "jobs:dlq").count(malformed) == 1);
  const std::string out = first.out() + second.out;
  INFO(out);
  CHECK(out.find("released") != std::string::npos);
  CHECK(out.find("dead-lettered") != std::string::npos);
  CHECK(out.find("ok ") != std::string::npos);
  // Every entry is one line, every line inert.
  CHECK(std::count(out.begin(), out.end(), '\n') == 4);
  CHECK(terminal_safe(out));
  CHECK(terminal_safe(first.err()));
  CHECK(terminal_safe(second.err));
}

TEST_CASE("worker (hostile): a garbage history is read as unreadable, never trusted, never fatal") {
  e2e::RedisServer server;
  REQUIRE_REDIS(server);
  create_group(server);
  const std::string not_json = add_task(server, "not-json", "fine 1");
  const std::string wrong_types = add_task(server, "wrong-types", "fine 2");
  const std::string deep = add_task(server, "deep", "fine 3");
  const std::string huge = add_task(server, "huge", "fine 4");
  const std::string numbers = add_task(server, "numbers", "fine 5");
  // Two charged crashes forged for deliveries 1 and 2 (--max-attempts 3): a
  // good payload is still judged on what it does, and ok.
  const std::string forged = add_task(server, "forged", "fine 6");
  deliver_to_ghost(server);
  must(server, {"XCLAIM", "jobs", "pillbox", "ghost", "0", forged, "RETRYCOUNT", "2", "JUSTID"});
  auto hset = [&](const std::string& id, const std::vector<std::string>& fields) {
    std::vector<std::string> args = {"HSET", "jobs:attempts:" + id};
    args.insert(args.end(), fields.begin(), fields.end());
    must(server, args);
  };
  hset(not_json, {"1", "{not json", "banana", "{}", "-1", "{}", "0", "{}", "99999999999999999999", "{}",
                  "4294967297", R"({"kind":"crash","charged":true,"fingerprint":"f"})"});
  hset(wrong_types, {"1", R"({"kind":7,"charged":"yes","crash_state":{"a":1},"signal":"SIGSEGV"})"});
  hset(deep, {"1", std::string(200'000, '[') + std::string(200'000, ']'),
              "2", R"({"kind":"crash","charged":true,"fingerprint":"from-the-future"})"});
  std::string frames = "[";
  for (int i = 0; i < 20'000; ++i) frames += std::string(i ? "," : "") + "\"frame\\u001b[2J" + std::to_string(i) + "\"";
  frames += "]";
  hset(huge, {"1", R"({"kind":"handler-error","charged":false,"message":")" + std::string(2 << 20, 'm') +
                       R"(","crash_state":)" + frames + "}"});
  // Numbers no field holds (a float into an int is undefined behaviour).
  hset(numbers, {"1", R"({"kind":"crash","charged":true,"signal":1e300,"exit_code":-1e30,"cpu_ms":-1})"});
  for (const char* n : {"1", "2"}) {
    hset(forged, {n, R"({"kind":"crash","charged":true,"fingerprint":"pb1-0000000000000000","signal":11})"});
  }

  const auto r = run_pillbox(worker_args(server, {"--claim-idle", "200ms", "--exit-when-idle", "1500ms", "--json"}));
  INFO(r.describe());
  CHECK(r.exit_code == 0);
  const auto results = by_entry(server, "jobs:results");
  for (const auto& id : {not_json, wrong_types, deep, huge, numbers}) {
    INFO(id);
    REQUIRE(results.count(id) == 1);
    CHECK(results.at(id).at("deliveries") == "2");
  }
  REQUIRE(results.count(forged) == 1);
  CHECK(results.at(forged).at("deliveries") == "3");
  CHECK(e2e::stream_entries(server, "jobs:dlq").empty());
  CHECK(e2e::pending_count(server, "jobs", "pillbox") == 0);
}

TEST_CASE("worker (hostile): a history key that is not a hash dead-letters its entry; the worker goes on") {
  e2e::RedisServer server;
  REQUIRE_REDIS(server);
  create_group(server);
  // Read with the history when taken over from a dead consumer ...
  const std::string as_string = add_task(server, "history-string", "fine");
  const std::string as_list = add_task(server, "history-list", "fine");
  deliver_to_ghost(server);
  must(server, {"SET", "jobs:attempts:" + as_string, "not a hash"});
  must(server, {"RPUSH", "jobs:attempts:" + as_list, "1", "2"});
  // ... or written after a failed run (its key made before it ran).
  const std::string at_record = add_task(server, "history-at-record", "S");
  must(server, {"SET", "jobs:attempts:" + at_record, "not a hash"});
  const std::string after = add_task(server, "after", "still runs");

  const auto r = run_pillbox(worker_args(server, {"--claim-idle", "200ms", "--exit-when-idle", "1500ms", "--json"}));
  INFO(r.describe());
  CHECK(r.exit_code == 0);
  const auto dlq = by_entry(server, "jobs:dlq");
  for (const auto& [id, type] : {std::pair{as_string, "string"}, {as_list, "list"}, {at_record, "string"}}) {
    const std::string entry_id = id;  // clang 14 cannot capture a structured binding
    INFO(entry_id);
    REQUIRE(dlq.count(id) == 1);
    CHECK(dlq.at(id).at("kind") == "protocol-error");
    CHECK(record_of(dlq.at(id))["message"].get<std::string>().find("holds a " + std::string(type) + ", not a hash") !=
          std::string::npos);
  }
  CHECK(by_entry(server, "jobs:results").at(after).at("output") == "still runs");
  CHECK(e2e::pending_count(server, "jobs", "pillbox") == 0);
  CHECK(e2e::redis_integer(server, {"EXISTS", "jobs:attempts:" + as_string, "jobs:attempts:" + as_list,
                                    "jobs:attempts:" + at_record}) == 0);
}

TEST_CASE("worker (hostile): delivery counts set by hand (XCLAIM RETRYCOUNT) are dead-lettered unrun, never looped on") {
  e2e::RedisServer server;
  REQUIRE_REDIS(server);
  create_group(server);
  // 2^32 - 1 becomes 2^32 when taken over (0 in 32 bits); 2^63 - 1 becomes
  // -2^63 in Redis's signed reply; a million would be a million lost deliveries.
  std::map<std::string, std::string> counts = {{"4294967295", ""}, {"9223372036854775807", ""}, {"1000000", ""}};
  for (auto& [count, id] : counts) id = add_task(server, "count-" + count, "S would crash");
  deliver_to_ghost(server);
  for (const auto& [count, id] : counts) {
    must(server, {"XCLAIM", "jobs", "pillbox", "ghost", "0", id, "RETRYCOUNT", count, "JUSTID"});
  }
  // The highest count still judged (kMaxDeliveries, supervisor/broker/worker_settings.h):
  // 9,999 deliveries that never reported back.
  const std::string at_cap = add_task(server, "count-at-cap", "S would crash");
  deliver_to_ghost(server);
  must(server, {"XCLAIM", "jobs", "pillbox", "ghost", "0", at_cap, "RETRYCOUNT", "9999", "JUSTID"});
  const std::string after = add_task(server, "after", "still runs");
  e2e::Background w(e2e::pillbox_binary(),
                    worker_args(server, {"--claim-idle", "200ms", "--exit-when-idle", "1500ms", "--json"}));
  CHECK(w.wait(std::chrono::seconds(60)) == 0);
  INFO(w.err());
  const auto dlq = by_entry(server, "jobs:dlq");
  for (const auto& [count, id] : counts) {
    const auto delivery_count = count;  // clang 14 cannot capture a structured binding
    INFO(delivery_count);
    REQUIRE(dlq.count(id) == 1);
    CHECK(dlq.at(id).at("kind") == "protocol-error");
    const json rec = record_of(dlq.at(id));
    CHECK(rec["wall_ms"] == 0);
    CHECK(rec["message"].get<std::string>().find("delivery count") != std::string::npos);
    CHECK(dlq.at(id).at("record").size() < 64 * 1024);
  }
  // At the cap the entry is still judged: of 9,999 deliveries nothing
  // recorded, only the first may have run (the others would have been
  // suspects' with a start marker: delivery_history.h), so it runs once
  // more, alone, crashes, and its retry's count is past the cap. Either way:
  // dead-lettered once, its record bounded, never looped on.
  REQUIRE(dlq.count(at_cap) == 1);
  CHECK(std::stoll(dlq.at(at_cap).at("deliveries")) >= 10000);
  CHECK(dlq.at(at_cap).at("record").size() < 1024 * 1024);
  CHECK(by_entry(server, "jobs:results").at(after).at("output") == "still runs");
  CHECK(e2e::pending_count(server, "jobs", "pillbox") == 0);
}

// A worker that must stop on a Redis error: it does, with one line that
// says what is wrong, and leaves what it held pending.
void check_stops_clearly(e2e::Background& w, const std::string& what) {
  CHECK(w.wait(std::chrono::seconds(60)) == 3);
  const std::string err = w.err();
  INFO(err);
  CHECK(err.find(what) != std::string::npos);
  CHECK(terminal_safe(err));
}

TEST_CASE("worker (hostile): NAME:results or NAME:dlq that is not a stream stops the worker with one clear line") {
  e2e::RedisServer server;
  REQUIRE_REDIS(server);
  SUBCASE("results") {
    const std::string id = add_task(server, "ok", "fine");
    must(server, {"SET", "jobs:results", "a string"});
    e2e::Background w(e2e::pillbox_binary(), worker_args(server, {"--exit-when-idle", "1s"}));
    check_stops_clearly(w, "the key 'jobs:results' on " + server.url() + "/0 holds a string, not a stream");
    CHECK(pending_on(server, id).second == 1);
  }
  SUBCASE("dead letters") {
    const std::string id = add_task(server, "crash", "S");
    must(server, {"RPUSH", "jobs:dlq", "a list"});
    e2e::Background w(e2e::pillbox_binary(), worker_args(server, {"--exit-when-idle", "1s"}));
    check_stops_clearly(w, "the key 'jobs:dlq' on " + server.url() + "/0 holds a list, not a stream");
    CHECK(pending_on(server, id).second == 2);
  }
}

TEST_CASE("worker (hostile): the group destroyed or the stream replaced mid-run stops the worker with one clear line") {
  e2e::RedisServer server;
  REQUIRE_REDIS(server);
  SUBCASE("group destroyed while idle") {
    e2e::Background w(e2e::pillbox_binary(), worker_args(server, {}));
    REQUIRE(e2e::eventually([&] { return must(server, {"CLIENT", "LIST"}).find("cmd=xreadgroup") != std::string::npos; }));
    must(server, {"XGROUP", "DESTROY", "jobs", "pillbox"});
    check_stops_clearly(w, "the consumer group 'pillbox' of the stream 'jobs' on " + server.url() + "/0 was destroyed");
  }
  SUBCASE("group destroyed while a task runs") {
    const std::string id = add_task(server, "slow", "fine");
    e2e::Background w(e2e::pillbox_binary(), slow_worker_args(server, {"--consumer", "w"}, "2"));
    REQUIRE(e2e::eventually([&] { return pending_on(server, id).first == "w"; }));
    must(server, {"XGROUP", "DESTROY", "jobs", "pillbox"});
    check_stops_clearly(w, "the consumer group 'pillbox' of the stream 'jobs' on " + server.url() + "/0 was destroyed");
    CHECK(e2e::stream_entries(server, "jobs:results").empty());
  }
  SUBCASE("stream replaced by a string") {
    const std::string id = add_task(server, "slow", "fine");
    e2e::Background w(e2e::pillbox_binary(), slow_worker_args(server, {"--consumer", "w"}, "2"));
    REQUIRE(e2e::eventually([&] { return pending_on(server, id).first == "w"; }));
    must(server, {"SET", "replacement", "a string"});
    must(server, {"RENAME", "replacement", "jobs"});  // at once: never seen missing
    check_stops_clearly(w, "the key 'jobs' on " + server.url() + "/0 holds a string, not a stream");
    CHECK(e2e::stream_entries(server, "jobs:results").empty());
  }
}

TEST_CASE("worker (hostile): a consumer group set to have read beyond the stream's end is reported, not silent") {
  e2e::RedisServer server;
  REQUIRE_REDIS(server);
  create_group(server);
  // Every id the stream will give for 3,000 years is below this one: '>'
  // delivers nothing to the group.
  must(server, {"XGROUP", "SETID", "jobs", "pillbox", "99999999999999-0"});
  add_task(server, "never-delivered", "fine");
  const auto r = run_pillbox(worker_args(server, {"--exit-when-idle", "1s"}));
  INFO(r.describe());
  CHECK(r.exit_code == 0);
  CHECK(r.err.find("warning: the consumer group 'pillbox' of the stream 'jobs' on " + server.url() +
                   "/0 was set to have read up to 99999999999999-0, beyond the stream's last entry") !=
        std::string::npos);
  CHECK(terminal_safe(r.err));
}

TEST_CASE("worker (hostile): an entry claimed or acknowledged by another consumer while it runs is not settled here") {
  e2e::RedisServer server;
  REQUIRE_REDIS(server);
  const std::string id = add_task(server, "stolen", "fine");
  e2e::Background w(e2e::pillbox_binary(),
                    slow_worker_args(server, {"--consumer", "w", "--exit-when-idle", "1s", "--json"}, "1"));
  REQUIRE(e2e::eventually([&] { return pending_on(server, id).first == "w"; }));
  std::string why;
  SUBCASE("claimed") {
    must(server, {"XCLAIM", "jobs", "pillbox", "thief", "0", id, "JUSTID"});
    why = "taken over by another consumer";
  }
  SUBCASE("acknowledged") {
    must(server, {"XACK", "jobs", "pillbox", id});
    why = "acknowledged by someone else";
  }
  CHECK(w.wait(std::chrono::seconds(60)) == 0);
  INFO(w.err());
  const auto line = json::parse(w.out(), nullptr, false);
  REQUIRE_FALSE(line.is_discarded());
  CHECK(line["verdict"] == "taken-over");
  CHECK(line["verdict_reason"].get<std::string>().find(why) != std::string::npos);
  CHECK(line["entry"] == id);
  CHECK(e2e::stream_entries(server, "jobs:results").empty());
  CHECK(e2e::redis_integer(server, {"XLEN", "jobs"}) == 1);  // not deleted: not this worker's to settle
  if (why.find("taken over") != std::string::npos) {
    CHECK(pending_on(server, id) == std::pair<std::string, long long>{"thief", 1});  // JUSTID: not counted
  }
}

TEST_CASE("worker (hostile): a running entry made to look idle is claimed by its own worker once, not run twice") {
  e2e::RedisServer server;
  REQUIRE_REDIS(server);
  const std::string id = add_task(server, "idle", "fine");
  // --claim-idle 1s: the worker's claim scan runs every 250 ms while the
  // 3 s task runs; XCLAIM ... IDLE makes the entry look idle for a day,
  // on the same consumer, at the same count.
  e2e::Background w(e2e::pillbox_binary(), slow_worker_args(server, {"--consumer", "w", "--jobs", "2", "--claim-idle",
                                                                     "1s", "--exit-when-idle", "1s", "--json"},
                                                            "3"));
  REQUIRE(e2e::eventually([&] { return pending_on(server, id).first == "w"; }));
  // The worker's renewal (every claim-idle/3) resets the idle time too: when
  // it comes before the next claim scan, the scan sees a busy entry. Make it
  // look idle again until a scan has claimed it (its delivery count rises).
  REQUIRE(e2e::eventually([&] {
    if (pending_on(server, id).second >= 2) return true;  // claimed by its own worker
    must(server, {"XCLAIM", "jobs", "pillbox", "w", "0", id, "IDLE", "86400000", "JUSTID"});
    return false;
  }));
  CHECK(w.wait(std::chrono::seconds(60)) == 0);
  INFO(w.err());
  // One verdict, one result: the run that was going on, settled at the
  // delivery its own worker's claim made (2, or more if a scan came between
  // the check above and one more XCLAIM).
  const std::string out = w.out();
  CHECK(std::count(out.begin(), out.end(), '\n') == 1);
  const auto line = json::parse(out, nullptr, false);
  REQUIRE_FALSE(line.is_discarded());
  CHECK(line["verdict"] == "ok");
  CHECK(line["deliveries"].get<int>() >= 2);
  const auto results = e2e::stream_entries(server, "jobs:results");
  REQUIRE(results.size() == 1);
  CHECK(results[0].fields.at("deliveries") == std::to_string(line["deliveries"].get<int>()));
  CHECK(e2e::pending_count(server, "jobs", "pillbox") == 0);
}

TEST_CASE("worker (hostile): an entry deleted while it runs is never settled, whoever notices first") {
  e2e::RedisServer server;
  REQUIRE_REDIS(server);
  const std::string id = add_task(server, "deleted", "fine");
  // --claim-idle 30s: no renewal or claim scan before the 1 s task ends; the
  // settle is the first to meet the deleted entry.
  e2e::Background w(e2e::pillbox_binary(),
                    slow_worker_args(server, {"--consumer", "w", "--exit-when-idle", "1s", "--json"}, "1"));
  REQUIRE(e2e::eventually([&] { return pending_on(server, id).first == "w"; }));
  must(server, {"XDEL", "jobs", id});
  CHECK(w.wait(std::chrono::seconds(60)) == 0);
  INFO(w.err());
  const auto line = json::parse(w.out(), nullptr, false);
  REQUIRE_FALSE(line.is_discarded());
  CHECK(line["entry"] == id);
  CHECK(line["verdict"] == "taken-over");
  CHECK(line["verdict_reason"].get<std::string>().find("no longer in the stream: deleted") != std::string::npos);
  CHECK(e2e::stream_entries(server, "jobs:results").empty());
  CHECK(e2e::pending_count(server, "jobs", "pillbox") == 0);
}

TEST_CASE("worker (hostile): an entry deleted and dropped from the pending list while it runs is reported as deleted") {
  e2e::RedisServer server;
  REQUIRE_REDIS(server);
  const std::string id = add_task(server, "deleted", "fine");
  // --claim-idle 300ms: the worker's own claim scan (XAUTOCLAIM) drops the
  // deleted entry from the pending list long before the 2 s task ends.
  e2e::Background w(e2e::pillbox_binary(), slow_worker_args(server, {"--consumer", "w", "--claim-idle", "300ms",
                                                                     "--exit-when-idle", "1s", "--json"},
                                                            "2"));
  REQUIRE(e2e::eventually([&] { return pending_on(server, id).first == "w"; }));
  must(server, {"XDEL", "jobs", id});
  CHECK(w.wait(std::chrono::seconds(60)) == 0);
  INFO(w.err());
  const auto line = json::parse(w.out(), nullptr, false);
  REQUIRE_FALSE(line.is_discarded());
  CHECK(line["entry"] == id);
  CHECK(line["verdict"] == "taken-over");
  CHECK(line["verdict_reason"].get<std::string>().find("no longer in the stream: deleted") != std::string::npos);
  CHECK(e2e::stream_entries(server, "jobs:results").empty());
  CHECK(e2e::pending_count(server, "jobs", "pillbox") == 0);
}

TEST_CASE("worker (hostile): a child's flood of output is bounded by --max-output; bytes that are not UTF-8 go as base64") {
  e2e::RedisServer server;
  REQUIRE_REDIS(server);
  const std::string at_cap = add_task(server, "at-cap", "head -c 65536 /dev/zero | tr '\\0' a");
  const std::string over_cap = add_task(server, "over-cap", "head -c 50000000 /dev/zero | tr '\\0' a");
  const std::string not_utf8 = add_task(server, "not-utf8", "head -c 65536 /dev/zero | tr '\\0' '\\377'");
  // One line of 50 MB on stderr, then a failure: its message is the end of that line.
  const std::string stderr_flood = add_task(server, "stderr-flood", "head -c 50000000 /dev/zero | tr '\\0' e >&2; exit 3");
  const auto r = run_pillbox({"worker", "--redis", server.url(), "--stream", "jobs", "--max-output", "64K",
                              "--backoff-base", "10ms", "--exit-when-idle", "1s", "--json", "--", "/bin/sh"});
  INFO(r.describe());
  CHECK(r.exit_code == 0);
  const auto results = by_entry(server, "jobs:results");
  const auto dlq = by_entry(server, "jobs:dlq");
  REQUIRE(results.count(at_cap) == 1);
  CHECK(results.at(at_cap).at("output") == std::string(65536, 'a'));
  REQUIRE(results.count(not_utf8) == 1);
  CHECK(results.at(not_utf8).count("output") == 0);
  CHECK(results.at(not_utf8).at("output_b64").size() == (65536 + 2) / 3 * 4);
  REQUIRE(dlq.count(over_cap) == 1);
  CHECK(dlq.at(over_cap).at("kind") == "output-limit");
  REQUIRE(dlq.count(stderr_flood) == 1);
  CHECK(dlq.at(stderr_flood).at("kind") == "handler-error");
  std::size_t biggest = 0;
  for (const auto& e : e2e::stream_entries(server, "jobs:dlq")) {
    for (const auto& [k, v] : e.fields) biggest = std::max(biggest, v.size());
  }
  CHECK(biggest < 64 * 1024);  // no field of a dead letter carries the flood
}

}  // namespace
