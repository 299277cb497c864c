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
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "tests/e2e/background.h"
#include "tests/e2e/kafka_client.h"
#include "tests/e2e/kafka_mock.h"
#include "tests/e2e/support.h"
#include "tests/e2e/task_program.h"

using json = nlohmann::json;
using namespace std::chrono_literals;

namespace {

// The first byte a terminal would act on (a control character but newline
// and tab, DEL, a C1 control as UTF-8), as "offset N: 0xHH"; "" when none.
std::string terminal_unsafe(const std::string& text) {
  for (std::size_t i = 0; i < text.size(); ++i) {
    const auto c = static_cast<unsigned char>(text[i]);
    const bool c1 = c == 0xc2 && i + 1 < text.size() && static_cast<unsigned char>(text[i + 1]) >= 0x80 &&
                    static_cast<unsigned char>(text[i + 1]) <= 0x9f;
    if ((c < 0x20 && c != '\n' && c != '\t') || c == 0x7f || c1) {
      std::ostringstream out;
      out << "offset " << i << ": 0x" << std::hex << static_cast<int>(c) << " in ..."
          << text.substr(i >= 60 ? i - 60 : 0, 120);
      return out.str();
    }
  }
  return "";
}

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

void check_all_committed(const e2e::KafkaMock& mock, const std::string& topic) {
  e2e::check_all_committed(mock.bootstrap(), topic, "pillbox");
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

std::vector<std::string> worker_args(const e2e::KafkaMock& mock, const std::string& topic,
                                     std::vector<std::string> more) {
  std::vector<std::string> args = {"worker", "--kafka", mock.bootstrap(), "--topic", topic, "--session-timeout", "6s",
                                   "--backoff-base", "10ms"};
  args.insert(args.end(), more.begin(), more.end());
  return args;
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
  const auto args = worker_args(mock, topic, {"--jobs", "2", "--exit-when-idle", "4s", "--max-payload", "4096",
                                              "--max-key", "64", "--", program.path()});
  const auto r = e2e::run_pillbox(args);
  INFO(r.describe());
  REQUIRE(r.exit_code == 0);
  CHECK_MESSAGE(terminal_unsafe(r.out).empty(), "stdout: " << terminal_unsafe(r.out));
  CHECK_MESSAGE(terminal_unsafe(r.err).empty(), "stderr: " << terminal_unsafe(r.err));

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
