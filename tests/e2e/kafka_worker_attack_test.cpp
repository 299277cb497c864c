// pillbox worker --kafka attacked (issue 29, Must-hold 1, 2, 3, 7) on
// librdkafka's mock cluster: a hostile producer to T (null, empty and
// oversized values, oversized and binary keys, headers named like
// pillbox's), a hostile writer of the attempt log and of the group's commit
// metadata, a rebalance while a task runs, a bad cluster (unreachable,
// topics missing, a broker down and up mid-run) and SIGTERM mid-run. What a
// record, an entry or a commit says is a claim: the worker never crashes
// or stalls on one, never charges a good payload for it, loses nothing,
// and prints nothing a terminal would obey.
#include <doctest/doctest.h>
#include <signal.h>

#include <algorithm>
#include <chrono>
#include <map>
#include <memory>
#include <nlohmann/json.hpp>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "shared/sha256.h"
#include "tests/e2e/background.h"
#include "tests/e2e/kafka_client.h"
#include "tests/e2e/kafka_mock.h"
#include "tests/e2e/support.h"
#include "tests/e2e/task_program.h"

using json = nlohmann::json;
using namespace std::chrono_literals;

namespace {

int count_headers(const e2e::KafkaRecord& r, const std::string& name) {
  int n = 0;
  for (const auto& [h, v] : r.headers) n += h == name ? 1 : 0;
  return n;
}

// The attempt log's entries, parsed where they parse (forged ones may
// not), by the record they are about ("p@o").
std::map<std::string, std::vector<json>> attempt_entries(const e2e::KafkaMock& mock, const std::string& topic) {
  std::map<std::string, std::vector<json>> by_record;
  for (const auto& r : e2e::read_topic(mock.bootstrap(), topic + ".pillbox-attempts")) {
    if (!r.value) continue;
    const json e = json::parse(*r.value, nullptr, false);
    if (!e.is_object() || !e.contains("partition") || !e.contains("offset") || !e["partition"].is_number() ||
        !e["offset"].is_number()) {
      continue;
    }
    by_record[std::to_string(e["partition"].get<long>()) + "@" + std::to_string(e["offset"].get<long>())].push_back(e);
  }
  return by_record;
}

// The entries pillbox wrote about `record` (a worker named; forged ones
// name "forger").
std::vector<json> pillbox_entries(const std::map<std::string, std::vector<json>>& all, const std::string& record) {
  std::vector<json> out;
  const auto it = all.find(record);
  if (it == all.end()) return out;
  for (const json& e : it->second) {
    if (e.value("worker", "") != "forger") out.push_back(e);
  }
  return out;
}

// An end entry that charged the payload with a failure.
bool charged_end(const json& e) {
  return e.value("entry", "") == "end" && e.contains("record") && e["record"].value("charged", false) &&
         e["record"].value("kind", "") != "ok";
}

// The results by dedupe key, with how many copies each has.
std::map<std::string, int> results_by_dedupe(const e2e::KafkaMock& mock, const std::string& topic) {
  std::map<std::string, int> out;
  for (const auto& r : e2e::read_topic(mock.bootstrap(), topic + ".results")) {
    ++out[r.header("pillbox.dedupe").value_or("(none)")];
  }
  return out;
}

void check_all_committed(const e2e::KafkaMock& mock, const std::string& topic) {
  e2e::check_all_committed(mock.bootstrap(), topic, "pillbox");
}

// Every record of `topic` has its result once (none twice: a worker that
// lost a record never produces its result), and the group committed every
// partition at its end.
void check_each_ok_once(const e2e::KafkaMock& mock, const std::string& topic, std::size_t records) {
  const auto results = results_by_dedupe(mock, topic);
  CHECK(results.size() == records);
  for (const auto& [key, copies] : results) {
    const std::string dedupe = key;
    CAPTURE(dedupe);
    CHECK(copies == 1);
  }
  check_all_committed(mock, topic);
}

e2e::KafkaOutgoing to_partition(int32_t partition, std::optional<std::string> key, std::optional<std::string> value,
                                std::vector<std::pair<std::string, std::string>> headers = {}) {
  e2e::KafkaOutgoing o;
  o.key = std::move(key);
  o.value = std::move(value);
  o.headers = std::move(headers);
  o.partition = partition;
  return o;
}

// A hand-written attempt-log entry about T's record 0@offset, naming the
// workers' group (an entry of another group is not counted by this one).
e2e::KafkaOutgoing forged_entry(long offset, json entry, std::optional<std::string> key = std::nullopt) {
  entry.emplace("v", 1);
  entry.emplace("group", "pillbox");
  entry.emplace("partition", 0);
  entry.emplace("offset", offset);
  entry.emplace("worker", "forger");
  return to_partition(0, key.value_or("0:" + std::to_string(offset)), entry.dump());
}

json forged_end(long delivery, bool charged, const std::string& kind, const std::string& fingerprint) {
  return {{"delivery", delivery},
          {"entry", "end"},
          {"record",
           {{"delivery", delivery},
            {"kind", kind},
            {"charged", charged},
            {"fingerprint", fingerprint},
            {"worker", "forger"},
            {"at_ms", 1}}}};
}

// A task program in the shell: a payload starting "slow" says it started
// (a file of its own in `dir`: not named by $$, which repeats across the
// tasks' PID namespaces), sleeps `seconds` and says it finished (another);
// every payload is echoed.
std::vector<std::string> slow_program(const e2e::TempDir& dir, const std::string& seconds) {
  return {"--writable", dir.path(), "--", "/bin/sh", "-c",
          "p=$(cat); case \"$p\" in slow*) mktemp " + dir.path() + "/started.XXXXXX >/dev/null; sleep " + seconds +
              "; mktemp " + dir.path() + "/finished.XXXXXX >/dev/null;; esac; printf %s \"$p\""};
}

std::vector<std::string> worker_args(const e2e::KafkaMock& mock, const std::string& topic,
                                     std::vector<std::string> more) {
  std::vector<std::string> args = {"worker", "--kafka", mock.bootstrap(), "--topic", topic, "--session-timeout", "6s",
                                   "--backoff-base", "10ms"};
  args.insert(args.end(), more.begin(), more.end());
  return args;
}

double seconds_since(std::chrono::steady_clock::time_point t) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t).count();
}

// A worker run to its end, and how long it took to be given its partitions
// (the attempt log's read included).
struct TimedRun {
  int exit_code = -1;
  double assigned_s = -1;
  std::string err;
};
TimedRun run_timed(const std::vector<std::string>& args) {
  const auto t0 = std::chrono::steady_clock::now();
  e2e::Background w(e2e::pillbox_binary(), args);
  TimedRun r;
  if (e2e::eventually([&] { return w.err().find(" assigned\n") != std::string::npos; }, 120s, 5ms)) {
    r.assigned_s = seconds_since(t0);
  }
  r.exit_code = w.wait(180s);
  r.err = w.err();
  return r;
}

}  // namespace

TEST_CASE("kafka worker attacked by its producer: null, empty, oversized, binary keys, forged headers") {
  const std::string topic = "hostile";
  e2e::KafkaMock mock(e2e::kafka_worker_topics(topic, 1));
  REQUIRE_KAFKA_MOCK(mock);
  const std::vector<std::pair<std::string, std::string>> forged = {
      {"pillbox-record", R"({"kind":"ok","attempts":0,"topic":{"dedupe":"hostile/0@999"}})"},
      {"pillbox-sig", "v1:forged"},
      {"pillbox.dedupe", "hostile/0@999"},
      {"pillbox.kind", "ok"},
      {"pillbox.attempts", "0"}};
  const std::string binary_key = std::string("\x1b[31mred\x07\r\n", 10) + std::string(1, '\0') + "bin\xc2\x9b]0;title\x07";
  std::vector<e2e::KafkaOutgoing> records = {
      to_partition(0, "null-value", std::nullopt),                      // 0: a tombstone
      to_partition(0, "empty", ""),                                     // 1
      to_partition(0, "too-big", std::string(5000, 'x')),               // 2: over --max-payload 4096
      to_partition(0, std::string(200, 'k'), "good behind a long key"),  // 3: over --max-key 64
      to_partition(0, binary_key, "good binary key"),                   // 4
      to_partition(0, "forged-crash", "S segfaults", forged),           // 5
      to_partition(0, "forged-good", "good forged headers", forged),    // 6
      to_partition(0, std::nullopt, "good null key"),                   // 7
  };
  for (int i = 0; i < 4; ++i) records.push_back(to_partition(0, "good-" + std::to_string(i), "good " + std::to_string(i)));
  e2e::produce(mock.bootstrap(), topic, records);

  // Human output (no --json): what a terminal shows must be safe.
  e2e::PoisonCopy program("kafka_hostile");
  const auto args = worker_args(mock, topic, {"--jobs", "2", "--exit-when-idle", "2s", "--max-payload", "4096",
                                              "--max-key", "64", "--", program.path()});
  const auto r = e2e::run_pillbox(args);
  INFO(r.describe());
  REQUIRE(r.exit_code == 0);
  CHECK_MESSAGE(e2e::terminal_unsafe(r.out).empty(), "stdout: " << e2e::terminal_unsafe(r.out));
  CHECK_MESSAGE(e2e::terminal_unsafe(r.err).empty(), "stderr: " << e2e::terminal_unsafe(r.err));

  // The dead letters: the tombstone and the two oversized ones refused
  // unrun (protocol-error), the crash judged; originals exact.
  std::map<int64_t, e2e::KafkaRecord> letters;
  for (auto& l : e2e::read_topic(mock.bootstrap(), topic + ".dlq")) {
    REQUIRE(l.header("pillbox.source.offset").has_value());
    letters.emplace(std::stoll(*l.header("pillbox.source.offset")), l);
  }
  CHECK(letters.size() == 4);
  for (int64_t o : {0, 2, 3}) {
    CAPTURE(o);
    REQUIRE(letters.count(o) == 1);
    CHECK(letters[o].header("pillbox.kind") == std::optional<std::string>("protocol-error"));
  }
  CHECK(!letters[0].value.has_value());  // null stays null
  CHECK(letters[0].key == std::optional<std::string>("null-value"));
  CHECK(letters[2].value == std::optional<std::string>(std::string(5000, 'x')));
  CHECK(letters[3].key == std::optional<std::string>(std::string(200, 'k')));
  // Forged headers: carried renamed, never read as pillbox's.
  REQUIRE(letters.count(5) == 1);
  const e2e::KafkaRecord& crash = letters[5];
  CHECK(crash.value == std::optional<std::string>("S segfaults"));
  for (const char* name : {"pillbox-record", "pillbox.dedupe", "pillbox.kind", "pillbox.attempts"}) {
    CAPTURE(name);
    CHECK(count_headers(crash, name) == 1);
  }
  CHECK(count_headers(crash, "pillbox-sig") == 0);  // no fleet key here: the forged one is not pillbox's
  CHECK(crash.header("pillbox.original.pillbox-sig") == std::optional<std::string>("v1:forged"));
  CHECK(crash.header("pillbox.original.pillbox-record") == std::optional<std::string>(forged[0].second));
  CHECK(crash.header("pillbox.dedupe") == std::optional<std::string>("hostile/0@5"));
  CHECK(crash.header("pillbox.kind") == std::optional<std::string>("crash"));
  const json record = json::parse(crash.header("pillbox-record").value_or("null"));
  CHECK(record.value("kind", "") == "crash");

  // The results: every good one, once, its own dedupe key (a forged one on
  // the original is not carried into its result).
  std::map<int64_t, e2e::KafkaRecord> results;
  for (auto& res : e2e::read_topic(mock.bootstrap(), topic + ".results")) {
    CHECK(count_headers(res, "pillbox.dedupe") == 1);
    REQUIRE(res.header("pillbox.source.offset").has_value());
    const int64_t o = std::stoll(*res.header("pillbox.source.offset"));
    CHECK(res.header("pillbox.dedupe") == std::optional<std::string>("hostile/0@" + std::to_string(o)));
    CHECK_MESSAGE(results.emplace(o, res).second, "twice: " << o);
  }
  CHECK(results.size() == 8);
  for (int64_t o : {1, 4, 6, 7, 8, 9, 10, 11}) {
    CAPTURE(o);
    CHECK(results.count(o) == 1);
  }
  CHECK(results[1].value == std::optional<std::string>(""));
  CHECK(results[4].key == std::optional<std::string>(binary_key));
  CHECK(results[4].value == std::optional<std::string>("good binary key"));
  CHECK(!results[7].key.has_value());
  // Refused records were never started: no start entry counts them.
  const auto entries = attempt_entries(mock, topic);
  for (const char* which : {"0@0", "0@2", "0@3"}) {
    CAPTURE(which);
    for (const json& e : pillbox_entries(entries, which)) CHECK(e.value("entry", "") != "start");
  }
  check_all_committed(mock, topic);
}

TEST_CASE("kafka worker attacked through its attempt log: forged entries, garbage, a flood") {
  const std::string topic = "forged";
  e2e::KafkaMock mock(e2e::kafka_worker_topics(topic, 1));
  REQUIRE_KAFKA_MOCK(mock);
  const std::string log = topic + ".pillbox-attempts";
  std::vector<e2e::KafkaOutgoing> records;
  for (const char* key : {"forged-settled", "forged-charged", "forged-gaps", "near-max", "at-max", "lost-once"}) {
    records.push_back(to_partition(0, key, std::string("good ") + key));
  }
  for (int i = 6; i < 12; ++i) records.push_back(to_partition(0, "good-" + std::to_string(i), "good " + std::to_string(i)));
  e2e::produce(mock.bootstrap(), topic, records);

  std::vector<e2e::KafkaOutgoing> entries = {
      // Well formed, believed (what a writer of the log can do):
      forged_entry(0, {{"delivery", 1}, {"entry", "settled"}, {"how", "ok"}, {"where", ""}}),
      forged_entry(1, {{"delivery", 1}, {"entry", "start"}}),
      forged_entry(1, forged_end(1, true, "crash", "forged-fingerprint")),
      forged_entry(1, {{"delivery", 2}, {"entry", "start"}}),
      forged_entry(1, forged_end(2, true, "crash", "forged-fingerprint")),
      forged_entry(4, {{"delivery", 10000}, {"entry", "start"}}),  // the last delivery a fleet counts
      // Well formed, and must charge nothing:
      forged_entry(2, forged_end(2, false, "", "")),  // releases at 2, 4, 6: gaps no worker leaves
      forged_entry(2, forged_end(4, false, "", "")),
      forged_entry(2, forged_end(6, false, "", "")),
      forged_entry(3, {{"delivery", 9998}, {"entry", "start"}}),
      forged_entry(3, forged_end(9998, false, "", "")),
      forged_entry(5, {{"delivery", 1}, {"entry", "start"}}),  // one that never reported back: a suspect
      // Not pillbox's: unreadable, counted, said.
      to_partition(0, "0:6", "not json"),
      to_partition(0, "0:6", "{}"),
      to_partition(0, "0:6", std::nullopt),
      forged_entry(6, {{"v", 2}, {"delivery", 1}, {"entry", "settled"}, {"how", "ok"}}),
      forged_entry(7, {{"partition", 1}, {"delivery", 1}, {"entry", "settled"}, {"how", "ok"}}, "1:7"),
      forged_entry(8, {{"delivery", 1}, {"entry", "settled"}, {"how", "ok"}}, "0:99"),
      forged_entry(9, {{"delivery", 1}, {"entry", "settled"}, {"how", "ok"}, {"where", std::string(200 << 10, 'w')}}),
      forged_entry(10, {{"delivery", 10001}, {"entry", "settled"}, {"how", "ok"}}),
      forged_entry(11, {{"delivery", "1"}, {"entry", "settled"}, {"how", "ok"}}),
      forged_entry(11, {{"delivery", 1}, {"entry", "settled"}, {"how", "maybe"}}),
      forged_entry(11, {{"delivery", 1}, {"entry", "end"}, {"record", "charged"}}),
      forged_entry(-1, {{"delivery", 1}, {"entry", "settled"}, {"how", "ok"}}, "0:-1"),
      to_partition(0, "0:11", std::string(900 << 10, '{')),  // a huge value
  };
  e2e::produce(mock.bootstrap(), log, entries);

  e2e::TempDir dir(01777, e2e::host_dir_tasks_see());
  const auto program = slow_program(dir, "0");
  auto args = worker_args(mock, topic, {"--jobs", "2", "--exit-when-idle", "2s", "--max-attempts", "3", "--json"});
  args.insert(args.end(), program.begin(), program.end());
  const auto first = run_timed(args);
  INFO("first worker:\n" << first.err);
  REQUIRE(first.exit_code == 0);
  CHECK(first.err.find("attempt-log entries are not pillbox's, not counted") != std::string::npos);
  CHECK(e2e::terminal_unsafe(first.err).empty());

  auto results = results_by_dedupe(mock, topic);
  std::map<std::string, std::string> letters;  // dedupe -> kind
  for (const auto& l : e2e::read_topic(mock.bootstrap(), topic + ".dlq")) {
    letters[l.header("pillbox.dedupe").value_or("?")] = l.header("pillbox.kind").value_or("?");
  }
  // What the log's writer can do: a forged settle skips a record, a
  // delivery at the limit dead-letters one unrun.
  CHECK(results.count("forged/0@0") == 0);
  CHECK(letters.count("forged/0@0") == 0);
  CHECK(letters["forged/0@4"] == "protocol-error");
  // What it cannot: dead-letter a record with charged crashes (the verdict
  // is the next run's), releases, gaps, one lost start, a delivery near
  // the limit, or anything unreadable.
  for (int o : {1, 2, 3, 5, 6, 7, 8, 9, 10, 11}) {
    const std::string dedupe = "forged/0@" + std::to_string(o);
    CAPTURE(dedupe);
    CHECK(results[dedupe] == 1);
    CHECK(letters.count(dedupe) == 0);
  }
  const auto logged = attempt_entries(mock, topic);
  const auto near_max = pillbox_entries(logged, "0@3");
  REQUIRE(!near_max.empty());
  CHECK(near_max.front().value("delivery", 0) == 9999);
  for (const auto& [record, es] : logged) {
    const std::string which = record;
    CAPTURE(which);
    for (const json& e : pillbox_entries(logged, which)) CHECK_MESSAGE(!charged_end(e), e.dump());
  }
  check_all_committed(mock, topic);

  // A flood: 100 000 entries after the commit's N, half garbage, half
  // starts of records T does not hold (yet).
  std::vector<e2e::KafkaOutgoing> flood;
  for (int i = 0; i < 100000; ++i) {
    flood.push_back(i % 2 == 0 ? to_partition(0, "0:x", "garbage " + std::to_string(i))
                               : forged_entry(1000000 + i, {{"delivery", 1}, {"entry", "start"}}));
    if (flood.size() == 20000) e2e::produce(mock.bootstrap(), log, std::exchange(flood, {}));
  }
  e2e::produce(mock.bootstrap(), topic, {to_partition(0, "after-flood", "good after the flood")});
  const auto second = run_timed(args);
  INFO("second worker:\n" << second.err);
  REQUIRE(second.exit_code == 0);
  // (The mock keeps a partition's latest segments only: the flood pushed
  // the oldest entries out, and the worker says it reads what is left.)
  CHECK(second.err.find("attempt-log entries are not pillbox's") != std::string::npos);
  results = results_by_dedupe(mock, topic);
  CHECK(results["forged/0@12"] == 1);
  // The next owner does not read the flood again: none of it held the
  // commit's N back.
  e2e::produce(mock.bootstrap(), topic, {to_partition(0, "after-after", "good after that")});
  const auto third = run_timed(args);
  INFO("third worker:\n" << third.err);
  REQUIRE(third.exit_code == 0);
  CHECK(third.err.find("not pillbox's") == std::string::npos);
  results = results_by_dedupe(mock, topic);
  CHECK(results["forged/0@13"] == 1);
  check_all_committed(mock, topic);
  MESSAGE("assigned after: forged log " << first.assigned_s << " s; over a flood of 100000 entries "
                                        << second.assigned_s << " s; the next owner " << third.assigned_s << " s");
}

TEST_CASE("kafka worker: commit metadata written by another client is not pillbox's, settled records stay settled") {
  const std::string topic = "junk";
  e2e::KafkaMock mock(e2e::kafka_worker_topics(topic, 3));
  REQUIRE_KAFKA_MOCK(mock);
  std::vector<e2e::KafkaOutgoing> records;
  for (int i = 0; i < 30; ++i) records.push_back(to_partition(i % 3, "k" + std::to_string(i), "good " + std::to_string(i)));
  e2e::produce(mock.bootstrap(), topic, records);
  e2e::TempDir dir(01777, e2e::host_dir_tasks_see());
  const auto program = slow_program(dir, "0");
  auto args = worker_args(mock, topic, {"--jobs", "2", "--exit-when-idle", "2s"});
  args.insert(args.end(), program.begin(), program.end());
  const auto first = e2e::run_pillbox(args);
  REQUIRE_MESSAGE(first.exit_code == 0, first.describe());
  CHECK(results_by_dedupe(mock, topic).size() == 30);

  // Another client moves the group back to 0 with metadata of its own.
  e2e::commit_offsets(mock.bootstrap(), topic, "pillbox",
                      {{0, {0, "junk\x1b[2J\x07"}}, {1, {0, "pillbox-attempts@999999999"}}, {2, {0, "pillbox-attempts@-5"}}});
  const auto second = e2e::run_pillbox(args);
  INFO("second worker: " << second.describe());
  REQUIRE(second.exit_code == 0);
  CHECK(e2e::terminal_unsafe(second.err).empty());
  CHECK(second.err.find("\"junk?[2J?\" is not pillbox-attempts@N") != std::string::npos);
  CHECK(second.err.find("the commit's metadata is not this log's") != std::string::npos);
  CHECK(second.err.find("\"pillbox-attempts@-5\" is not pillbox-attempts@N") != std::string::npos);
  // Nothing ran again: each record is settled in the log read from its beginning.
  check_each_ok_once(mock, topic, 30);
}

TEST_CASE("kafka worker: a rebalance while a task runs hands it over uncharged, ok once") {
  const std::string topic = "handover";
  e2e::KafkaMock mock(e2e::kafka_worker_topics(topic, 2));
  REQUIRE_KAFKA_MOCK(mock);
  std::vector<e2e::KafkaOutgoing> records = {to_partition(0, "slow-0", "slow 0"), to_partition(1, "slow-1", "slow 1")};
  for (int i = 0; i < 10; ++i) records.push_back(to_partition(i % 2, "good-" + std::to_string(i), "good " + std::to_string(i)));
  e2e::produce(mock.bootstrap(), topic, records);
  e2e::TempDir dir(01777, e2e::host_dir_tasks_see());
  const auto program = slow_program(dir, "6");
  auto args = worker_args(mock, topic, {"--jobs", "2", "--exit-when-idle", "4s", "--json"});
  args.insert(args.end(), program.begin(), program.end());

  e2e::Background a(e2e::pillbox_binary(), args);
  REQUIRE_MESSAGE(e2e::eventually([&] { return e2e::count_files_starting(dir.path(), "started.") >= 2; }, 60s), a.err());
  // Both slow tasks run on A; B joins: the group takes everything back
  // (eager rebalance) and hands it out again.
  const auto joined = std::chrono::steady_clock::now();
  e2e::Background b(e2e::pillbox_binary(), args);
  CHECK(a.wait(120s) == 0);
  CHECK(b.wait(120s) == 0);
  INFO("A:\n" << a.err() << "\nB:\n" << b.err());
  CHECK(a.err().find("taken away (a rebalance)") != std::string::npos);
  const std::size_t settled_by_two = results_by_dedupe(mock, topic).size();
  // The mock's group coordinator (librdkafka 2.0.2) may leave a member's
  // JoinGroup unanswered in the rebalance after the first: B waits in it
  // while A gets only its own share, and both end idle with the other
  // share unread (left, uncommitted). A worker alone finishes it.
  const auto last = e2e::run_pillbox(args);
  INFO("last worker: " << last.describe());
  CHECK(last.exit_code == 0);
  MESSAGE("handover: A and B done " << seconds_since(joined) << " s after B started, " << settled_by_two
                                    << " of 12 settled by them; the rest by a worker alone");

  // The fence: a task whose partition was taken away is never settled by
  // the worker that lost it (no second result).
  check_each_ok_once(mock, topic, 12);
  CHECK(e2e::read_topic(mock.bootstrap(), topic + ".dlq").empty());
  // A's runs of the slow records were stopped by the revoke (their
  // children killed), not left to run to their end beside the next
  // owner's: each slow record finished once (4 when A's went on).
  CHECK(e2e::count_files_starting(dir.path(), "started.") >= 4);
  CHECK(e2e::count_files_starting(dir.path(), "finished.") == 2);
  // Each slow record: its first delivery released uncharged by the revoke,
  // its next one ok; nothing charged.
  const auto logged = attempt_entries(mock, topic);
  for (const char* which : {"0@0", "1@0"}) {
    CAPTURE(which);
    const auto es = pillbox_entries(logged, which);
    REQUIRE(es.size() >= 3);
    bool released = false;
    for (const json& e : es) {
      CHECK_MESSAGE(!charged_end(e), e.dump());
      if (e.value("entry", "") == "end" && e["record"].value("note", "").find("partition revoked") != std::string::npos) {
        released = true;
      }
    }
    CHECK(released);
    CHECK(es.back().value("entry", "") == "settled");
  }
}

TEST_CASE("kafka worker: SIGTERM mid-run finishes what runs, leaves the rest uncharged") {
  const std::string topic = "term";
  e2e::KafkaMock mock(e2e::kafka_worker_topics(topic, 1));
  REQUIRE_KAFKA_MOCK(mock);
  std::vector<e2e::KafkaOutgoing> records;
  for (int i = 0; i < 4; ++i) records.push_back(to_partition(0, "slow-" + std::to_string(i), "slow " + std::to_string(i)));
  for (int i = 0; i < 8; ++i) records.push_back(to_partition(0, "good-" + std::to_string(i), "good " + std::to_string(i)));
  e2e::produce(mock.bootstrap(), topic, records);
  e2e::TempDir dir(01777, e2e::host_dir_tasks_see());
  const auto program = slow_program(dir, "2");
  auto args = worker_args(mock, topic, {"--jobs", "2", "--json"});
  args.insert(args.end(), program.begin(), program.end());

  e2e::Background w(e2e::pillbox_binary(), args);
  REQUIRE_MESSAGE(e2e::eventually([&] { return e2e::count_files_starting(dir.path(), "started.") >= 2; }, 60s), w.err());
  const auto signalled = std::chrono::steady_clock::now();
  w.signal(SIGTERM);
  CHECK(w.wait(60s) == 128 + SIGTERM);
  const double stop_s = seconds_since(signalled);
  INFO("worker:\n" << w.err());
  CHECK(w.err().find("stopping (SIGTERM)") != std::string::npos);
  MESSAGE("SIGTERM: the worker ended " << stop_s << " s after it");
  // What ran finished and is settled; nothing else was started.
  const auto results = results_by_dedupe(mock, topic);
  CHECK(results.size() == 2);
  CHECK(results.count("term/0@0") == 1);
  CHECK(results.count("term/0@1") == 1);
  const auto logged = attempt_entries(mock, topic);
  for (int o = 2; o < 12; ++o) {
    const std::string which = "0@" + std::to_string(o);
    CAPTURE(which);
    for (const json& e : pillbox_entries(logged, which)) CHECK_MESSAGE(!charged_end(e), e.dump());
  }
  const auto progress = e2e::group_progress(mock.bootstrap(), topic, "pillbox");
  CHECK(progress.committed.at(0) == 2);

  // The next worker runs the rest, each once.
  auto rest = args;
  rest.insert(rest.begin() + 5, {"--exit-when-idle", "2s"});
  const auto r = e2e::run_pillbox(rest);
  INFO(r.describe());
  CHECK(r.exit_code == 0);
  check_each_ok_once(mock, topic, 12);
}

TEST_CASE("kafka worker: an unreachable cluster is a clear error, in bounded time") {
  const auto r = e2e::run_pillbox({"worker", "--kafka", e2e::closed_kafka_bootstrap(), "--topic", "nowhere", "--", "/bin/cat"});
  INFO(r.describe());
  CHECK(r.exit_code == 3);
  CHECK(r.err.find("Kafka") != std::string::npos);
  CHECK(r.seconds < 40);
  MESSAGE("unreachable: exit " << r.exit_code << " after " << r.seconds << " s");
}

TEST_CASE("kafka worker on a bad cluster: topics missing, a broker down and up mid-run") {
  const std::string topic = "shaky";
  e2e::KafkaMock mock({{topic, 3}, {topic + ".results", 3}});
  REQUIRE_KAFKA_MOCK(mock);
  e2e::TempDir dir(01777, e2e::host_dir_tasks_see());
  const auto program = slow_program(dir, "0.2");
  auto args = worker_args(mock, topic, {"--jobs", "2", "--exit-when-idle", "5s", "--json"});
  args.insert(args.end(), program.begin(), program.end());

  // Missing topics: the error names them and the command that creates them.
  auto r = e2e::run_pillbox(args);
  INFO(r.describe());
  CHECK(r.exit_code != 0);
  CHECK(r.err.find(topic + ".pillbox-attempts") != std::string::npos);
  CHECK(r.err.find("kafka-topics.sh") != std::string::npos);
  CHECK(r.seconds < 30);
  mock.create_topic(topic + ".pillbox-attempts", 3);
  r = e2e::run_pillbox(args);
  INFO(r.describe());
  CHECK(r.exit_code != 0);
  CHECK(r.err.find(topic + ".dlq") != std::string::npos);
  CHECK(r.err.find("kafka-topics.sh") != std::string::npos);
  CHECK(e2e::topic_partitions(mock.bootstrap(), topic + ".dlq") == 0);  // still missing: never made by naming it
  mock.create_topic(topic + ".dlq", 3);

  std::vector<e2e::KafkaOutgoing> records;
  for (int i = 0; i < 60; ++i) records.push_back(to_partition(i % 3, "k" + std::to_string(i), "slow " + std::to_string(i)));
  e2e::produce(mock.bootstrap(), topic, records);

  // The group's coordinator cannot say what was committed when the
  // partitions are given: nothing runs from a guess, and the worker does
  // not sit on partitions it will never read.
  mock.must("request-errors OffsetFetch GROUP_AUTHORIZATION_FAILED,GROUP_AUTHORIZATION_FAILED,"
            "GROUP_AUTHORIZATION_FAILED,GROUP_AUTHORIZATION_FAILED,GROUP_AUTHORIZATION_FAILED");
  r = e2e::run_pillbox(args);
  mock.must("clear-request-errors OffsetFetch");
  INFO(r.describe());
  CHECK(r.exit_code == 3);
  CHECK(r.err.find("cannot read what the group committed for partition") != std::string::npos);
  CHECK(r.err.find("stopped by that Kafka error") != std::string::npos);
  CHECK(e2e::count_files_starting(dir.path(), "started.") == 0);
  MESSAGE("committed offsets unreadable: exit " << r.exit_code << " after " << r.seconds << " s");

  e2e::Background w(e2e::pillbox_binary(), args);
  REQUIRE_MESSAGE(e2e::eventually([&] { return e2e::count_files_starting(dir.path(), "started.") >= 6; }, 60s), w.err());
  // A broker down for 5 s while tasks run: its partitions have no leader
  // (the mock moves none), its connections close.
  mock.broker_down(2);
  std::this_thread::sleep_for(5s);  // the outage's length is what is tested
  mock.broker_up(2);
  const int code = w.wait(180s);
  INFO("worker:\n" << w.err());
  CHECK(code == 0);
  // It lost its partitions when the coordinator went (a rebalance), and
  // counts idle again once the group gives them back, or 2 session
  // timeouts after (the mock's group takes from 0.5 s to more than that to
  // form again: what it leaves is not asserted, only that it is not lost).
  const std::size_t left_by_first = 60 - results_by_dedupe(mock, topic).size();
  // Whatever this worker left (an outage is not a record's fault), the
  // next runs: a worker that stays, until every record has its result.
  auto staying = args;
  staying.erase(std::find(staying.begin(), staying.end(), "--exit-when-idle"), std::find(staying.begin(), staying.end(), "--json"));
  const auto next_from = std::chrono::steady_clock::now();
  e2e::Background next(e2e::pillbox_binary(), staying);
  const bool finished = e2e::eventually([&] { return results_by_dedupe(mock, topic).size() == 60; }, 120s, 500ms);
  const double next_s = seconds_since(next_from);
  next.signal(SIGTERM);
  CHECK(next.wait(60s) == 128 + SIGTERM);
  INFO("next worker:\n" << next.err());
  CHECK(finished);
  const auto results = results_by_dedupe(mock, topic);
  CHECK(results.size() == 60);
  MESSAGE("after the outage: " << left_by_first << " records left by the first worker, the next one settled them in "
                               << next_s << " s");
  std::size_t copies_over_one = 0;
  for (const auto& [dedupe, copies] : results) copies_over_one += copies - 1;
  MESSAGE("broker down 5 s mid-run: " << results.size() << " results, " << copies_over_one << " duplicates");
  CHECK(e2e::read_topic(mock.bootstrap(), topic + ".dlq").empty());
  const auto logged = attempt_entries(mock, topic);
  for (const auto& [record, es] : logged) {
    const std::string which = record;
    CAPTURE(which);
    for (const json& e : es) CHECK_MESSAGE(!charged_end(e), e.dump());
  }
  check_all_committed(mock, topic);
}

// A result or a dead letter is produced before its record is settled:
// one the cluster refused would stop every worker that got the record,
// its partition stuck for good (as a dead letter within 128 KiB of the
// broker's limit did: exit 3, "Message size too large"). What is over
// what a broker takes (1048588 bytes by default) goes without its value,
// its size and SHA-256 said, and for a dead letter where the original is.
TEST_CASE("kafka worker: a result or dead letter too large for a record goes without the value, the partition moves on") {
  const std::string topic = "huge";
  e2e::KafkaMock mock(e2e::kafka_worker_topics(topic, 1));
  REQUIRE_KAFKA_MOCK(mock);
  // The first worker, with the Kafka default --max-payload (1000000):
  // 0: over it, refused unrun, its dead letter whole (it fits); 1: good.
  const std::string over_default = "S" + std::string(1000000, 'd');
  e2e::produce(mock.bootstrap(), topic,
               {to_partition(0, "over-default", over_default), to_partition(0, "behind", "good behind it")});
  // Payloads starting with S kill their task (SIGSEGV), the rest are echoed.
  const std::vector<std::string> program = {
      "--", "/bin/sh", "-c", "c=$(head -c 1); if [ \"$c\" = S ]; then kill -SEGV $$; fi; printf %s \"$c\"; exec cat"};
  auto first = worker_args(mock, topic, {"--exit-when-idle", "2s"});
  first.insert(first.end(), program.begin(), program.end());
  auto r = e2e::run_pillbox(first);
  INFO(r.describe());
  REQUIRE(r.exit_code == 0);
  // The second, with --max-payload 2M: 2: echoed, its output with the
  // result's headers over the broker's limit; 3: a crash within 128 KiB
  // of it; 4: good behind them.
  const std::string big(1048000, 'o');
  const std::string huge_crash = "S" + std::string(1046000, 'x');
  e2e::produce(mock.bootstrap(), topic,
               {to_partition(0, "big", big), to_partition(0, "huge-crash", huge_crash),
                to_partition(0, "behind-2", "good behind them")});
  auto second = worker_args(mock, topic, {"--exit-when-idle", "2s", "--max-payload", "2M"});
  second.insert(second.end(), program.begin(), program.end());
  r = e2e::run_pillbox(second);
  INFO(r.describe());
  REQUIRE(r.exit_code == 0);

  std::map<std::string, e2e::KafkaRecord> results;
  for (auto& res : e2e::read_topic(mock.bootstrap(), topic + ".results")) results.emplace(res.key.value_or(""), res);
  CHECK(results.size() == 3);
  REQUIRE(results.count("big") == 1);
  CHECK(results["big"].value == std::optional<std::string>(""));
  CHECK(results["big"].header("output_size") == std::optional<std::string>(std::to_string(big.size())));
  CHECK(results["big"].header("output_sha256") == std::optional<std::string>(pillbox::sha256_hex(big)));
  CHECK(results["big"].header("output_omitted").value_or("").starts_with("too large for a Kafka record"));
  CHECK(results["behind"].value == std::optional<std::string>("good behind it"));
  CHECK(results["behind-2"].value == std::optional<std::string>("good behind them"));

  std::map<std::string, e2e::KafkaRecord> letters;
  for (auto& l : e2e::read_topic(mock.bootstrap(), topic + ".dlq")) letters.emplace(l.key.value_or(""), l);
  CHECK(letters.size() == 2);
  REQUIRE(letters.count("over-default") == 1);
  const e2e::KafkaRecord& refused = letters["over-default"];
  CHECK(refused.header("pillbox.kind") == std::optional<std::string>("protocol-error"));
  CHECK(refused.header("pillbox.message").value_or("").find("1000001 bytes is over the limit of 1000000 bytes (the "
                                                           "worker's --max-payload)") != std::string::npos);
  CHECK(refused.value == std::optional<std::string>(over_default));
  CHECK(!refused.header("pillbox.payload_omitted").has_value());
  for (const json& e : pillbox_entries(attempt_entries(mock, topic), "0@0")) CHECK(e.value("entry", "") != "start");

  REQUIRE(letters.count("huge-crash") == 1);
  const e2e::KafkaRecord& crash = letters["huge-crash"];
  CHECK(crash.header("pillbox.kind") == std::optional<std::string>("crash"));
  CHECK(crash.value == std::optional<std::string>(""));
  CHECK(crash.header("pillbox.payload_omitted") == std::optional<std::string>("true"));
  CHECK(crash.header("pillbox.payload_size") == std::optional<std::string>(std::to_string(huge_crash.size())));
  CHECK(crash.header("pillbox.payload_sha256") == std::optional<std::string>(pillbox::sha256_hex(huge_crash)));
  CHECK(crash.header("pillbox.source.offset") == std::optional<std::string>("3"));
  const json record = json::parse(crash.header("pillbox-record").value_or("null"));
  CHECK(record.value("payload_omitted", false));
  CHECK(record.value("payload_size", 0) == static_cast<long>(huge_crash.size()));
  CHECK(record.value("payload_sha256", "") == pillbox::sha256_hex(huge_crash));
  CHECK(record.value("payload_omitted_why", "").find("the original is in huge partition 0 at offset 3") !=
        std::string::npos);
  // The partition moved on: everything settled and committed.
  check_all_committed(mock, topic);
}
