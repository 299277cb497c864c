// pillbox quarantine replay --kafka against librdkafka's mock cluster
// (kafka_mock.h): a record republished to T keeps its key and value (not
// pillbox's headers) and carries pillbox.replay; a worker still broken
// fails it again, the batch stops (--stop-after), and its new dead letter
// is an attempt of the record (named by its state, left out of listings,
// refused by show), not a record; while a replay holds a record a second
// replay of it is refused; once the fix runs, every record resolves, its
// result in T.results, each republished once per replay that took it. A
// replay SIGKILLed while it waits holds the record until its lease runs
// out; the next replay records its redrive's outcome, republishing nothing.
#include <doctest/doctest.h>
#include <signal.h>

#include <map>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "tests/e2e/amqp_client.h"
#include "tests/e2e/background.h"
#include "tests/e2e/kafka_client.h"
#include "tests/e2e/kafka_mock.h"
#include "tests/e2e/kafka_quarantine_cli.h"
#include "tests/e2e/support.h"
#include "tests/e2e/task_program.h"

using json = nlohmann::json;

namespace {

const std::string kTopic = "tasks";

std::vector<std::string> quarantine(const e2e::KafkaMock& mock, const std::vector<std::string>& verb,
                                    const std::string& key) {
  return e2e::kafka_quarantine(mock, kTopic, verb, key);
}

std::vector<std::string> worker(const e2e::KafkaMock& mock, const std::string& key, const std::string& program,
                                bool until_idle) {
  std::vector<std::string> args = {"worker", "--kafka", mock.bootstrap(), "--topic", kTopic, "--jobs", "2",
                                   "--backoff-base", "10ms", "--session-timeout", "6s", "--fleet-key", key};
  if (until_idle) args.insert(args.end(), {"--exit-when-idle", "4s"});
  args.insert(args.end(), {"--", program});
  return args;
}

std::string id_of(const e2e::KafkaRecord& r) { return std::to_string(r.partition) + "@" + std::to_string(r.offset); }

// The records of T that a replay republished, by the record they replay.
std::multimap<std::string, e2e::KafkaRecord> republished(const e2e::KafkaMock& mock) {
  std::multimap<std::string, e2e::KafkaRecord> out;
  for (const auto& r : e2e::read_topic(mock.bootstrap(), kTopic)) {
    if (const auto of = r.header("pillbox.replay")) out.emplace(*of, r);
  }
  return out;
}

json shown(const e2e::KafkaMock& mock, const std::string& id, const std::string& key) {
  return e2e::kafka_shown(mock, kTopic, id, key);
}

}  // namespace

TEST_CASE("kafka replay: republished with its key, fails again as an attempt, one replay at a time, resolved") {
  e2e::KafkaMock mock({{kTopic, 2},
                       {kTopic + ".pillbox-attempts", 2},
                       {kTopic + ".dlq", 2},
                       {kTopic + ".results", 2},
                       {kTopic + ".dlq.state", 1}});
  REQUIRE_KAFKA_MOCK(mock);
  e2e::TempDir dir(0700);
  const std::string key = e2e::fleet_key_file(dir);
  e2e::PoisonCopy broken("kafka_task");
  std::string lines;
  for (int i = 0; i < 4; ++i) lines += e2e::task_line("bad-" + std::to_string(i), "E rejected " + std::to_string(i));
  const auto submitted = e2e::run_pillbox({"submit", "--kafka", mock.bootstrap(), "--topic", kTopic, "-"}, lines);
  REQUIRE_MESSAGE(submitted.exit_code == 0, submitted.describe());
  const auto worked = e2e::run_pillbox(worker(mock, key, broken.path(), true));
  REQUIRE_MESSAGE(worked.exit_code == 0, worked.describe());
  std::map<std::string, std::string> ids;  // key -> record id
  for (const auto& r : e2e::read_topic(mock.bootstrap(), kTopic + ".dlq")) ids[*r.key] = id_of(r);
  REQUIRE(ids.size() == 4);

  // The worker still broken: the first record fails again and stops the replay.
  std::string failed_id;
  {
    e2e::Background still_broken(e2e::pillbox_binary(), worker(mock, key, broken.path(), false));
    const auto replay = e2e::run_pillbox(
        quarantine(mock, {"replay", "--all", "--batch", "1", "--stop-after", "1", "--batch-timeout", "60s", "--json"},
                   key));
    INFO(replay.describe());
    CHECK(replay.exit_code == 1);
    CHECK(replay.err.find("4 selected, 1 replayed: 0 resolved, 1 failed again; 3 left as they were") !=
          std::string::npos);
    REQUIRE(replay.records.size() == 1);
    CHECK(replay.records[0]["replay"] == "failed-again");
    CHECK(replay.records[0]["kind"] == "handler-error");
    failed_id = replay.records[0]["record_id"];
    still_broken.signal(SIGTERM);
    CHECK(still_broken.wait() == 128 + SIGTERM);  // a worker stopped says so
  }
  // Its new dead letter is an attempt of it: named by its state, not listed, not shown.
  const json failed = shown(mock, failed_id, key);
  REQUIRE(failed.is_object());
  CHECK(failed["status"] == "failed-again");
  std::string attempt_letter;
  for (const auto& r : e2e::read_topic(mock.bootstrap(), kTopic + ".dlq")) {
    if (r.header("pillbox.original.pillbox.replay") == std::optional<std::string>(failed_id)) attempt_letter = id_of(r);
  }
  REQUIRE(!attempt_letter.empty());
  const auto listed = e2e::run_pillbox(quarantine(mock, {"list", "--json"}, key));
  CHECK(listed.exit_code == 0);
  CHECK(listed.records.size() == 4);
  CHECK(listed.err.find("1 letter of tasks.dlq left out: the dead letter of a replay that failed again") !=
        std::string::npos);
  const auto attempt = e2e::run_pillbox(quarantine(mock, {"show", attempt_letter}, key));
  CHECK(attempt.exit_code == 2);
  CHECK(attempt.err.find(attempt_letter + " is the dead letter of a replay of record " + failed_id) !=
        std::string::npos);
  CHECK(failed.dump().find(attempt_letter) != std::string::npos);  // its redrive's outcome names it
  const auto after_first = republished(mock);
  REQUIRE(after_first.count(failed_id) == 1);
  const e2e::KafkaRecord& first = after_first.find(failed_id)->second;
  std::string failed_key;
  for (const auto& [k, id] : ids) failed_key = id == failed_id ? k : failed_key;
  CHECK(first.key == std::optional<std::string>(failed_key));
  CHECK(first.header("pillbox-submit").has_value() == false);  // pillbox's own headers left behind

  // Two replays of one record at once: the second is refused. The first
  // holds the record while no worker runs, and resolves once the fix does.
  std::string held;
  for (const auto& [k, id] : ids) held = id != failed_id ? id : held;
  e2e::Background first_replay(e2e::pillbox_binary(),
                               quarantine(mock, {"replay", held, "--batch-timeout", "60s", "--json"}, key));
  CHECK_MESSAGE(e2e::eventually([&] { return shown(mock, held, key).value("status", "") == "replaying"; }),
                first_replay.err());
  const auto second = e2e::run_pillbox(quarantine(mock, {"replay", held, "--json"}, key));
  CHECK(second.err.find("record " + held + " is being replayed right now") != std::string::npos);
  CHECK(second.records.empty());
  const auto discard = e2e::run_pillbox(quarantine(mock, {"discard", held, "--reason", "busy"}, key));
  CHECK(discard.exit_code != 0);
  CHECK(discard.err.find("is being replayed right now") != std::string::npos);

  e2e::Background fixed(e2e::pillbox_binary(), worker(mock, key, "/bin/cat", false));
  CHECK_MESSAGE(first_replay.wait() == 0, first_replay.err());
  CHECK(first_replay.err().find("1 selected, 1 replayed: 1 resolved, 0 failed again") != std::string::npos);
  CHECK(shown(mock, held, key).value("status", "") == "resolved");

  // The fix: the rest resolve, the one that failed again among them.
  const auto replay = e2e::run_pillbox(quarantine(mock, {"replay", "--all", "--batch", "2", "--batch-timeout",
                                                         "60s", "--json"},
                                                  key));
  INFO(replay.describe());
  CHECK(replay.exit_code == 0);
  CHECK(replay.err.find("3 selected, 3 replayed: 3 resolved, 0 failed again") != std::string::npos);
  for (const auto& [k, id] : ids) {
    const json r = shown(mock, id, key);
    CHECK_MESSAGE(r.value("status", "") == "resolved", id << ": " << r.dump());
  }
  // Each replay republished its record once, with its key; each has its result.
  const auto all = republished(mock);
  CHECK(all.size() == 5);
  CHECK(all.count(failed_id) == 2);
  for (const auto& [k, id] : ids) {
    for (auto [it, end] = all.equal_range(id); it != end; ++it) CHECK(it->second.key == std::optional<std::string>(k));
  }
  std::map<std::string, int> results;  // key -> how many
  CHECK(e2e::eventually([&] {
    results.clear();
    for (const auto& r : e2e::read_topic(mock.bootstrap(), kTopic + ".results")) ++results[r.key.value_or("")];
    return results.size() == 4;
  }));
  for (const auto& [k, id] : ids) CHECK_MESSAGE(results[k] == 1, k);
  fixed.signal(SIGTERM);
  CHECK(fixed.wait() == 128 + SIGTERM);
}

// A replay SIGKILLed while it waits: its lease holds the record (a second
// replay refused) until it runs out; the record is not republished again,
// and the next replay records the outcome of the killed one's redrive once
// a worker settles it.
TEST_CASE("kafka replay: SIGKILLed while waiting, its redrive's outcome found by the next replay, never republished") {
  e2e::KafkaMock mock({{kTopic, 1},
                       {kTopic + ".pillbox-attempts", 1},
                       {kTopic + ".dlq", 1},
                       {kTopic + ".results", 1},
                       {kTopic + ".dlq.state", 1}});
  REQUIRE_KAFKA_MOCK(mock);
  e2e::TempDir dir(0700);
  const std::string key = e2e::fleet_key_file(dir);
  e2e::PoisonCopy broken("kafka_task");
  const auto submitted = e2e::run_pillbox({"submit", "--kafka", mock.bootstrap(), "--topic", kTopic, "-"},
                                          e2e::task_line("bad", "E rejected"));
  REQUIRE_MESSAGE(submitted.exit_code == 0, submitted.describe());
  const auto worked = e2e::run_pillbox(worker(mock, key, broken.path(), true));
  REQUIRE_MESSAGE(worked.exit_code == 0, worked.describe());
  const std::string id = "0@0";

  e2e::Background killed(e2e::pillbox_binary(), quarantine(mock, {"replay", id, "--batch-timeout", "60s"}, key));
  // Killed once its state names where the record went (before that, it
  // waits as replay-HEX, which only --force gets past).
  REQUIRE_MESSAGE(e2e::eventually([&] {
    const json r = shown(mock, id, key);
    return r.is_object() && r.dump().find(kTopic + "/0@1") != std::string::npos;
  }), killed.err());
  CHECK(republished(mock).count(id) == 1);
  killed.signal(SIGKILL);
  CHECK(killed.wait() == 128 + SIGKILL);
  const auto refused = e2e::run_pillbox(quarantine(mock, {"replay", id}, key));
  CHECK_MESSAGE(refused.err.find("is being replayed right now") != std::string::npos, refused.describe());

  e2e::Background fixed(e2e::pillbox_binary(), worker(mock, key, "/bin/cat", false));
  // Once its lease runs out (60 s), the next replay finds the outcome.
  e2e::RunResult found;
  CHECK(e2e::eventually(
      [&] {
        found = e2e::run_pillbox(quarantine(mock, {"replay", id, "--json"}, key));
        return found.exit_code == 0 && found.records.size() == 1;
      },
      std::chrono::seconds(120), std::chrono::seconds(2)));
  INFO(found.describe());
  REQUIRE(found.records.size() == 1);
  CHECK(found.records[0]["replay"] == "resolved");
  CHECK(found.err.find("1 selected, 1 replayed: 1 resolved") != std::string::npos);
  CHECK(republished(mock).count(id) == 1);  // the killed replay's redrive, not another
  const json r = shown(mock, id, key);
  CHECK(r.value("status", "") == "resolved");
  CHECK(r.dump().find("redriven by an earlier replay that did not record how it ended") != std::string::npos);
  fixed.signal(SIGTERM);
  CHECK(fixed.wait() == 128 + SIGTERM);
}
