// pillbox worker --kafka against librdkafka's mock cluster (3 brokers on
// loopback, started by the test: kafka_mock.h): ok results go to T.results
// and crashes to T.dlq with pillbox's record, each record's attempts are in
// the attempt log, and the group's offsets end committed at each
// partition's end; a record that kills its worker every time is counted by
// the attempt log across workers and dead-lettered as supervisor-lost,
// unrun, by whichever worker gets it after --max-attempts, while the good
// records behind it in its partition are never charged.
#include <doctest/doctest.h>
#include <signal.h>

#include <chrono>
#include <map>
#include <memory>
#include <nlohmann/json.hpp>
#include <set>
#include <sstream>
#include <string>
#include <vector>

#include "tests/e2e/background.h"
#include "tests/e2e/kafka_client.h"
#include "tests/e2e/kafka_mock.h"
#include "tests/e2e/support.h"
#include "tests/e2e/task_program.h"

using json = nlohmann::json;
using namespace std::chrono_literals;

namespace {

std::vector<std::string> lines_of(const std::string& text) {
  std::vector<std::string> out;
  std::istringstream in(text);
  for (std::string line; std::getline(in, line);) {
    if (!line.empty()) out.push_back(line);
  }
  return out;
}

void submit(const e2e::KafkaMock& mock, const std::string& topic, const std::string& lines) {
  const auto r = e2e::run_pillbox({"submit", "--kafka", mock.bootstrap(), "--topic", topic, "-"}, lines);
  REQUIRE_MESSAGE(r.exit_code == 0, r.describe());
}

// The attempt log's entries, parsed, by the record they are about ("p@o").
std::map<std::string, std::vector<json>> attempt_entries(const e2e::KafkaMock& mock, const std::string& topic) {
  std::map<std::string, std::vector<json>> by_record;
  for (const auto& r : e2e::read_topic(mock.bootstrap(), topic + ".pillbox-attempts")) {
    REQUIRE(r.value.has_value());
    const json e = json::parse(*r.value);
    by_record[std::to_string(e.at("partition").get<int>()) + "@" + std::to_string(e.at("offset").get<long>())]
        .push_back(e);
  }
  return by_record;
}

}  // namespace

TEST_CASE("kafka worker: results and dead letters with their record, every attempt logged, offsets committed") {
  const std::string topic = "tasks";
  e2e::KafkaMock mock(e2e::kafka_worker_topics(topic, 3));
  REQUIRE_KAFKA_MOCK(mock);
  e2e::PoisonCopy program("kafka_task");
  std::string lines;
  for (int i = 0; i < 20; ++i) lines += e2e::task_line("good-" + std::to_string(i), "good payload " + std::to_string(i));
  lines += e2e::task_line("segv", "S segfaults");
  lines += e2e::task_line("abort", "A aborts");
  submit(mock, topic, lines);

  const auto r = e2e::run_pillbox({"worker", "--kafka", mock.bootstrap(), "--topic", topic, "--jobs", "2",
                                   "--backoff-base", "10ms", "--exit-when-idle", "4s", "--session-timeout", "6s",
                                   "--json", "--", program.path()});
  INFO(r.describe());
  REQUIRE(r.exit_code == 0);

  // What the worker said: each record once, ok or dead-lettered.
  std::map<std::string, std::string> verdicts;
  for (const auto& line : lines_of(r.out)) {
    const json j = json::parse(line);
    const std::string verdict = j.at("verdict");
    if (verdict == "ok" || verdict == "dead-lettered") {
      CHECK_MESSAGE(verdicts.emplace(j.at("key").get<std::string>(), verdict).second, "twice: " << line);
    }
  }
  CHECK(verdicts.size() == 22);
  CHECK(verdicts["segv"] == "dead-lettered");
  CHECK(verdicts["abort"] == "dead-lettered");

  // The results: one per good record, its output the payload (echoed), its key the record's.
  const auto results = e2e::read_topic(mock.bootstrap(), topic + ".results");
  CHECK(results.size() == 20);
  std::set<std::string> dedupe;
  for (const auto& res : results) {
    REQUIRE(res.key.has_value());
    CHECK(*res.value == "good payload " + res.key->substr(5));
    REQUIRE(res.header("pillbox.dedupe").has_value());
    dedupe.insert(*res.header("pillbox.dedupe"));
  }
  CHECK(dedupe.size() == 20);

  // The dead letters: the original key and value exact, pillbox's record
  // with the crash, its attempts (the same crash twice: poison).
  const auto letters = e2e::read_topic(mock.bootstrap(), topic + ".dlq");
  REQUIRE(letters.size() == 2);
  for (const auto& l : letters) {
    REQUIRE(l.key.has_value());
    CHECK((*l.key == "segv" || *l.key == "abort"));
    CHECK(*l.value == (*l.key == "segv" ? "S segfaults" : "A aborts"));
    CHECK(l.header("pillbox.kind") == std::optional<std::string>("crash"));
    CHECK(l.header("pillbox.source.topic") == std::optional<std::string>(topic));
    REQUIRE(l.header("pillbox-record").has_value());
    const json record = json::parse(*l.header("pillbox-record"));
    CHECK(record.at("kind") == "crash");
    CHECK(record.at("attempts").get<int>() >= 2);
  }

  // The attempt log: each record's start, end and settled entries; the
  // start came first.
  const auto entries = attempt_entries(mock, topic);
  CHECK(entries.size() == 22);
  for (const auto& [which, es] : entries) {
    const std::string record = which;
    CAPTURE(record);
    REQUIRE(es.size() >= 3);
    CHECK(es.front().at("entry") == "start");
    CHECK(es.back().at("entry") == "settled");
  }
  e2e::check_all_committed(mock.bootstrap(), topic, "pillbox");
}

TEST_CASE("kafka worker: a record that kills its worker is counted across workers and dead-lettered unrun") {
  const std::string topic = "killer";
  e2e::KafkaMock mock(e2e::kafka_worker_topics(topic, 1));
  REQUIRE_KAFKA_MOCK(mock);
  e2e::PoisonCopy program("kafka_killer_task");
  // The killer first in the only partition, good records behind it.
  std::string lines = e2e::task_line("killer", "L kills its worker's supervisor");
  for (int i = 0; i < 10; ++i) lines += e2e::task_line("good-" + std::to_string(i), "good payload " + std::to_string(i));
  submit(mock, topic, lines);
  const std::vector<std::string> args = {"worker", "--kafka", mock.bootstrap(), "--topic", topic, "--jobs", "1",
                                         "--max-attempts", "3", "--timeout", "120s", "--cpu", "120s",
                                         "--session-timeout", "6s", "--json", "--", program.path()};
  std::vector<std::unique_ptr<e2e::Background>> workers;
  auto stderr_of_all = [&] {
    std::string all;
    for (const auto& w : workers) all += "--- worker:\n" + w->err() + "\n";
    return all;
  };
  // Each round a worker, until the killer runs: then it dies with it.
  int kills = 0;
  while (kills < 3) {
    workers.push_back(std::make_unique<e2e::Background>(e2e::pillbox_binary(), args));
    e2e::Background& w = *workers.back();
    REQUIRE_MESSAGE(e2e::eventually([&] { return !e2e::running_tasks(program.path()).empty(); }, 90s),
                    "the killer never ran (kills so far: " << kills << ")\n" << stderr_of_all());
    e2e::kill_worker_with(w, e2e::running_tasks(program.path()));
    ++kills;
  }
  // The next worker reads three starts that never ended: the killer is
  // dead-lettered unrun, and the good ones run.
  auto last_args = args;
  last_args.insert(last_args.begin() + 5, {"--exit-when-idle", "4s"});
  const auto r = e2e::run_pillbox(last_args);
  INFO(r.describe() << stderr_of_all());
  REQUIRE(r.exit_code == 0);
  CHECK(e2e::running_tasks(program.path()).empty());
  const auto letters = e2e::read_topic(mock.bootstrap(), topic + ".dlq");
  REQUIRE(letters.size() == 1);
  CHECK(letters[0].key == std::optional<std::string>("killer"));
  CHECK(letters[0].header("pillbox.kind") == std::optional<std::string>("supervisor-lost"));
  // Every good record ran ok, once, never charged for the killer's deaths.
  const auto results = e2e::read_topic(mock.bootstrap(), topic + ".results");
  std::set<std::string> ok;
  for (const auto& res : results) ok.insert(*res.key);
  CHECK(ok.size() == 10);
  CHECK(results.size() == 10);
  const auto entries = attempt_entries(mock, topic);
  CHECK(entries.at("0@0").size() == 3 + 1);  // three starts, never ended; then its settle
  e2e::check_all_committed(mock.bootstrap(), topic, "pillbox");
}

TEST_CASE("kafka worker: --exit-when-idle does not count a rebalance that waits for a dead member") {
  // A rebalance with a dead member in the group lasts until its session
  // times out and the group forms again (about 12 s here with
  // --session-timeout 6s), longer than --exit-when-idle: a worker that
  // counted it as idle left mid-rebalance, and when every member did, the
  // dead member's records waited for a worker to come.
  const std::string topic = "rebalance";
  e2e::KafkaMock mock(e2e::kafka_worker_topics(topic, 2));
  REQUIRE_KAFKA_MOCK(mock);
  e2e::PoisonCopy program("kafka_idle_task");
  auto worker = [&](const std::string& name, std::vector<std::string> extra) {
    std::vector<std::string> args = {"worker", "--kafka", mock.bootstrap(), "--topic", topic, "--consumer", name,
                                     "--jobs", "1", "--session-timeout", "6s"};
    args.insert(args.end(), extra.begin(), extra.end());
    args.insert(args.end(), {"--", program.path()});
    return std::make_unique<e2e::Background>(e2e::pillbox_binary(), args);
  };
  auto assigned = [](const e2e::Background& w) { return w.err().find(" assigned") != std::string::npos; };
  // The one to die first holds both partitions, then one when the idle
  // one has joined; then it is killed and another joins: the idle one's
  // partition is taken away until the group forms without the dead one.
  auto doomed = worker("doomed", {});
  REQUIRE(e2e::eventually([&] { return assigned(*doomed); }, 30s));
  auto idle = worker("idle", {"--exit-when-idle", "3s"});
  REQUIRE_MESSAGE(e2e::eventually([&] { return assigned(*idle); }, 30s), idle->err());
  doomed->signal(SIGKILL);
  CHECK(doomed->wait() == 128 + SIGKILL);
  auto next = worker("next", {});
  // The idle one leaves 3 s after the group gave it its share again, not
  // during the rebalance.
  CHECK(idle->wait(60s) == 0);
  const std::string said = idle->err();
  INFO(said);
  const auto taken = said.find("taken away (a rebalance)");
  REQUIRE(taken != std::string::npos);
  const auto again = said.find(" assigned", taken);
  const auto stopping = said.find("stopping (nothing new for");
  REQUIRE(stopping != std::string::npos);
  CHECK(again < stopping);
  // The records submitted now are run by the one that joined last.
  submit(mock, topic, e2e::task_line("after", "after the rebalance"));
  REQUIRE(e2e::eventually([&] { return e2e::read_topic(mock.bootstrap(), topic + ".results").size() == 1; }, 60s));
  next->signal(SIGTERM);
  CHECK(next->wait() == 128 + SIGTERM);
}
