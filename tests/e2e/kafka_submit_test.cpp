// pillbox submit --kafka against librdkafka's mock cluster (kafka_mock.h: 3
// brokers on loopback, a 6-partition topic; one cluster for the cases of a
// test case, each case a function): each task is one acknowledged record,
// its key the task's key and its value the payload's exact bytes; a key
// always lands on the partition other (Java-compatible) clients put it on; a
// missing topic is an error that says how to make it, and is not made by
// asking; --create-topics on a cluster without CreateTopics (the mock) says
// so; an unreachable cluster ends submit within its bound, exit 3; an
// oversized payload is an input error.
#include <doctest/doctest.h>
#include <sys/stat.h>

#include <algorithm>
#include <cctype>
#include <chrono>
#include <map>
#include <set>
#include <string>
#include <vector>

#include "tests/e2e/kafka_client.h"
#include "tests/e2e/kafka_mock.h"
#include "tests/e2e/support.h"

using e2e::run_pillbox;

namespace {

const char* const kTopic = "jobs";
constexpr int kPartitions = 6;

bool is_hex16(const std::string& s) {
  return s.size() == 16 && std::all_of(s.begin(), s.end(), [](char c) { return std::isxdigit(static_cast<unsigned char>(c)); });
}

std::string id_of(const e2e::KafkaRecord& r) { return std::to_string(r.partition) + ":" + std::to_string(r.offset); }

const e2e::KafkaRecord& by_key(const std::vector<e2e::KafkaRecord>& records, const std::string& key) {
  const auto it = std::find_if(records.begin(), records.end(), [&](const auto& r) { return r.key == key; });
  REQUIRE_MESSAGE(it != records.end(), "no record with key " << key);
  return *it;
}

// Files, a directory and JSON lines become one record each, exact bytes.
void exact_bytes(e2e::KafkaMock& mock) {
  e2e::TempDir in;
  const std::string binary("\x00\xff\x01 not utf-8 \x80\x00", 16);
  const std::string one = in.write("one.bin", binary);
  ::mkdir((in.path() + "/dir").c_str(), 0755);
  in.write("dir/a", "first in the directory");
  in.write("dir/b", "");
  const std::string odd_key = "k\tkey \xc3\xa9\n";  // a tab, UTF-8, a newline
  const std::string lines = e2e::task_line(odd_key, std::string("line\0payload", 12));
  const auto r = run_pillbox({"submit", "--kafka", mock.bootstrap(), "--topic", kTopic, one, in.path() + "/dir", "-"},
                             lines);
  INFO(r.describe());
  CHECK(r.exit_code == 0);
  CHECK(r.err.find("4 tasks added to topic jobs on Kafka " + mock.bootstrap()) != std::string::npos);
  CHECK(std::count(r.err.begin(), r.err.end(), '\n') == 1);

  const auto got = e2e::read_topic(mock.bootstrap(), kTopic);
  REQUIRE(got.size() == 4);
  CHECK(by_key(got, one).value == binary);
  CHECK(by_key(got, in.path() + "/dir/a").value == "first in the directory");
  CHECK(by_key(got, in.path() + "/dir/b").value == "");  // empty, not null
  CHECK(by_key(got, odd_key).value == std::string("line\0payload", 12));
  // One header names the submit: the same for its records.
  std::set<std::string> submits;
  for (const auto& rec : got) {
    REQUIRE(rec.headers.size() == 1);
    const auto submit = rec.header("pillbox-submit");
    REQUIRE(submit.has_value());
    CHECK(is_hex16(*submit));
    submits.insert(*submit);
  }
  CHECK(submits.size() == 1);
  // The summary's ids are PARTITION:OFFSET of the first and last records.
  CHECK(r.err.find("records (partition:offset) " + id_of(by_key(got, one)) + " to " + id_of(by_key(got, odd_key))) !=
        std::string::npos);
}

// A key always goes to one partition, the one a Java-compatible client
// (murmur2) puts it on; keys spread over the partitions.
void keys_to_partitions(e2e::KafkaMock& mock) {
  mock.create_topic("keyed", kPartitions);
  std::string lines;
  std::vector<e2e::KafkaOutgoing> theirs;
  for (int round = 0; round < 2; ++round) {
    for (int k = 0; k < 24; ++k) lines += e2e::task_line("key-" + std::to_string(k), "round " + std::to_string(round));
  }
  for (int k = 0; k < 24; ++k) theirs.push_back({"key-" + std::to_string(k), "theirs", {}, std::nullopt});
  const auto r = run_pillbox({"submit", "--kafka", mock.bootstrap(), "--topic", "keyed", "-"}, lines);
  INFO(r.describe());
  REQUIRE(r.exit_code == 0);
  const auto placed = e2e::produce(mock.bootstrap(), "keyed", theirs);
  std::map<std::string, std::set<int32_t>> partitions_of;
  for (const auto& rec : e2e::read_topic(mock.bootstrap(), "keyed")) partitions_of[*rec.key].insert(rec.partition);
  REQUIRE(partitions_of.size() == 24);
  std::set<int32_t> used;
  for (int k = 0; k < 24; ++k) {
    const auto& ps = partitions_of["key-" + std::to_string(k)];
    INFO("key-" << k);
    CHECK(ps.size() == 1);
    CHECK(*ps.begin() == placed[static_cast<std::size_t>(k)].first);
    used.insert(*ps.begin());
  }
  CHECK(used.size() >= 4);  // 24 keys over 6 partitions
}

// A missing topic: an error that says how to make it; asking did not make it.
void missing_topic(e2e::KafkaMock& mock) {
  e2e::TempDir in;
  const std::string f = in.write("t", "task");
  const auto r = run_pillbox({"submit", "--kafka", mock.bootstrap(), "--topic", "nope", f});
  INFO(r.describe());
  CHECK(r.exit_code == 2);
  CHECK(r.err.find("topic nope does not exist on Kafka at " + mock.bootstrap() +
                   ": create it (kafka-topics.sh --bootstrap-server " + mock.bootstrap() +
                   " --create --topic nope --partitions 6) or give --create-topics") != std::string::npos);
  CHECK(std::count(r.err.begin(), r.err.end(), '\n') == 1);
  // The mock creates every topic a client names: pillbox named none.
  CHECK(e2e::topic_partitions(mock.bootstrap(), "nope") == 0);
}

// --create-topics on the mock, which has no CreateTopics: it says so, and
// how to create the topic by hand, within its bound.
void create_topics_refused(e2e::KafkaMock& mock) {
  e2e::TempDir in;
  const std::string f = in.write("t", "task");
  const auto r = run_pillbox({"submit", "--kafka", mock.bootstrap(), "--topic", "fresh", "--create-topics",
                              "--partitions", "3", "--replication-factor", "2", f});
  INFO(r.describe());
  CHECK(r.exit_code == 3);
  CHECK(r.err.find("Kafka at " + mock.bootstrap() + " did not create topic fresh: CreateTopics failed (") !=
        std::string::npos);
  CHECK(r.err.find("librdkafka's mock cluster") != std::string::npos);
  CHECK(r.err.find("create it by hand: kafka-topics.sh --bootstrap-server " + mock.bootstrap() +
                   " --create --topic fresh --partitions 3 --replication-factor 2") != std::string::npos);
  CHECK(r.seconds < 20);
  CHECK(e2e::topic_partitions(mock.bootstrap(), "fresh") == 0);
}

// A payload over --max-payload (default 1000000 bytes on Kafka) is an input
// error; the rest are added, the largest allowed included.
void oversized_payload(e2e::KafkaMock& mock) {
  mock.create_topic("sized", 1);
  e2e::TempDir in;
  const std::string small = in.write("small", "small");
  const std::string largest = in.write("largest", std::string(1000000, 'L'));
  const std::string over = in.write("over", std::string(1000001, 'O'));
  const auto r = run_pillbox({"submit", "--kafka", mock.bootstrap(), "--topic", "sized", small, over, largest});
  INFO(r.describe());
  CHECK(r.exit_code == 1);
  CHECK(r.err.find(over + ": payload of 1000001 bytes is over --max-payload (1000000 bytes): not added") !=
        std::string::npos);
  CHECK(r.err.find("2 tasks added to topic sized") != std::string::npos);
  CHECK(r.err.find("1 inputs could not be read") != std::string::npos);
  const auto got = e2e::read_topic(mock.bootstrap(), "sized");
  REQUIRE(got.size() == 2);
  CHECK(got[0].key == small);
  CHECK(got[1].key == largest);
  CHECK(got[1].value->size() == 1000000);
}

}  // namespace

TEST_CASE("submit --kafka against the mock cluster: exact bytes, keys to partitions, a missing topic, sizes") {
  e2e::KafkaMock mock({{kTopic, kPartitions}});
  REQUIRE_KAFKA_MOCK(mock);
  {
    INFO("submit --kafka: files, a directory and JSON lines become one record each, exact bytes");
    exact_bytes(mock);
  }
  {
    INFO("submit --kafka: a key always goes to the partition a Java-compatible client puts it on");
    keys_to_partitions(mock);
  }
  {
    INFO("submit --kafka: a missing topic is an error that says how to make it, and is not made");
    missing_topic(mock);
  }
  {
    INFO("submit --kafka: --create-topics on a cluster without CreateTopics says so, and how to create it");
    create_topics_refused(mock);
  }
  {
    INFO("submit --kafka: a payload over --max-payload is an input error; the rest are added");
    oversized_payload(mock);
  }
}

TEST_CASE("submit --kafka: 10 000 small tasks, every one in the topic once (records/s measured)") {
  e2e::KafkaMock mock({{kTopic, kPartitions}});
  REQUIRE_KAFKA_MOCK(mock);
  constexpr int kTasks = 10000;
  std::string lines;
  for (int i = 0; i < kTasks; ++i) lines += e2e::task_line("task-" + std::to_string(i), "payload " + std::to_string(i));
  const auto r = run_pillbox({"submit", "--kafka", mock.bootstrap(), "--topic", kTopic, "-"}, lines);
  INFO(r.describe());
  REQUIRE(r.exit_code == 0);
  MESSAGE("submit --kafka: " << kTasks << " tasks in " << r.seconds << " s (" << static_cast<int>(kTasks / r.seconds)
                             << " records/s, the process's start included)");
  const auto got = e2e::read_topic(mock.bootstrap(), kTopic);
  CHECK(got.size() == static_cast<std::size_t>(kTasks));
  std::set<std::string> keys;
  for (const auto& rec : got) keys.insert(*rec.key);
  CHECK(keys.size() == static_cast<std::size_t>(kTasks));
}

TEST_CASE("submit --kafka: an unreachable cluster is exit 3 within its bound; usage errors are one line each") {
  e2e::TempDir in;
  const std::string f = in.write("t", "task");
  {
    const std::string closed = e2e::closed_kafka_bootstrap();
    const auto r = run_pillbox({"submit", "--kafka", closed, "--topic", "jobs", f});
    INFO(r.describe());
    CHECK(r.exit_code == 3);
    CHECK(r.err.find("cannot reach Kafka at " + closed + " within 5 s: ") != std::string::npos);
    CHECK(r.err.find("Connection refused") != std::string::npos);
    CHECK(std::count(r.err.begin(), r.err.end(), '\n') == 1);
    CHECK(r.seconds < 10);
  }
  struct Case {
    std::vector<std::string> args;
    std::string says;
  };
  const std::vector<Case> cases = {
      {{"--kafka", "127.0.0.1:1", f}, "--kafka needs --topic NAME"},
      {{"--topic", "jobs", f}, "--topic goes with --kafka BROKERS"},
      {{"--create-topics", f}, "--create-topics goes with --kafka BROKERS"},
      {{"--kafka", "127.0.0.1:1", "--topic", "jobs", "--queue", "q", f}, "--queue does not go with --kafka"},
      {{"--kafka", "127.0.0.1:1", "--topic", "jobs", "--amqp", "amqp://h/%2f", f}, "--amqp does not go with --kafka"},
      {{"--kafka", "127.0.0.1:1", "--topic", "jobs", "--redis", "redis://h", f}, "--redis does not go with --kafka"},
      {{"--kafka", "127.0.0.1:1", "--topic", "jobs", "--partitions", "3", f}, "--partitions goes with --create-topics"},
      {{"--kafka", "127.0.0.1:1", "--topic", "jobs", "--create-topics", "--partitions", "0", f}, "--partitions"},
      {{"--kafka", "127.0.0.1:1", "--topic", "a/b", f}, "only letters, digits"},
      {{"--kafka", "127.0.0.1:1", "--topic", "jobs"}, "no inputs"},
      {{"--kafka", "", "--topic", "jobs", f}, "--kafka HOST:PORT[,HOST:PORT...]: empty"},
      {{"--kafka", "127.0.0.1", "--topic", "jobs", f}, "'127.0.0.1' has no port"},
      {{"--kafka", "127.0.0.1:99999", "--topic", "jobs", f}, "'127.0.0.1:99999' has a port that is not 1 to 65535"},
      {{"--kafka", "a:9092, b:9092", "--topic", "jobs", f}, "no spaces"},
  };
  for (const Case& c : cases) {
    std::vector<std::string> args = {"submit"};
    args.insert(args.end(), c.args.begin(), c.args.end());
    const auto r = run_pillbox(args);
    INFO(r.describe());
    CHECK(r.exit_code == 2);
    CHECK(r.err.find(c.says) != std::string::npos);
    CHECK(std::count(r.err.begin(), r.err.end(), '\n') == 1);
  }
}
