#pragma once
// librdkafka's mock Kafka cluster for the end-to-end tests: the
// pillbox-kafka-mock program (tests/e2e/kafka_mock_main.cpp) started with the
// test's topics, N brokers on loopback whose bootstrap list it prints when
// ready (no polling), driven through its stdin (topics, brokers down and
// up, coordinators, injected errors: one command, one answer), stopped (its
// stdin closed, then waited for) at the end of the scope.
//
// What the mock is not (docs/distributed.md, Kafka): it keeps everything in
// memory, speaks Metadata v0-2 only (so it creates every topic a client
// names; pillbox never names a missing one), and implements no CreateTopics.
#include <sys/types.h>

#include <string>
#include <utility>
#include <vector>

#include "tests/e2e/support.h"

// Ends the test case with "skipped: why" when the mock cannot run here.
#define REQUIRE_KAFKA_MOCK(mock)                    \
  if (!(mock).available()) {                        \
    MESSAGE("skipped: " << (mock).why_not());       \
    return;                                         \
  }

namespace e2e {

struct KafkaTopicSpec {
  std::string name;
  int partitions = 1;
};

class KafkaMock {
 public:
  // Starts the mock with `brokers` brokers (1 to 64) and `topics`
  // (replication min(3, brokers)). When the program is not built,
  // available() is false and says why; when it is but does not get ready
  // within 30 s, the test fails with what it said.
  explicit KafkaMock(const std::vector<KafkaTopicSpec>& topics = {}, int brokers = 3);
  ~KafkaMock();
  KafkaMock(const KafkaMock&) = delete;
  KafkaMock& operator=(const KafkaMock&) = delete;

  bool available() const { return pid_ > 0; }
  const std::string& why_not() const { return why_not_; }
  // "127.0.0.1:PORT,127.0.0.1:PORT,...": what --kafka takes.
  const std::string& bootstrap() const { return bootstrap_; }
  int brokers() const { return brokers_; }
  pid_t pid() const { return pid_; }

  // One command line to the mock (kafka_mock_main.cpp lists them); its
  // answer, "ok" or "error: WHY". Fails the test when the mock does not
  // answer within 10 s.
  std::string command(const std::string& line);
  // The same, failing the test unless the answer is "ok".
  void must(const std::string& line);

  void create_topic(const std::string& name, int partitions) { must("topic " + name + " " + std::to_string(partitions)); }
  // Broker 1 to brokers(): its connections closed and new ones refused
  // (no leader moves: its partitions have none until it is up again).
  void broker_down(int id) { must("broker-down " + std::to_string(id)); }
  void broker_up(int id) { must("broker-up " + std::to_string(id)); }
  // The broker that coordinates consumer group `group`.
  void group_coordinator(const std::string& group, int broker) {
    must("coordinator group " + group + " " + std::to_string(broker));
  }

  // Closes its stdin (it stops: the cluster and all it held are gone) and
  // waits for it; SIGKILL and a failed check after 10 s.
  void stop();
  // What it wrote on stderr (librdkafka's errors).
  std::string err() const;

 private:
  TempDir dir_;
  int brokers_ = 0;
  pid_t pid_ = 0;
  int in_ = -1;   // its stdin
  int out_ = -1;  // its stdout
  std::string pending_;  // read from `out_`, not yet a line
  std::string bootstrap_;
  std::string why_not_;

  bool read_line(std::string& line, int timeout_ms);
};

// The topics of a Kafka worker of `topic`, `partitions` each: `topic` and
// what the worker writes (topic.pillbox-attempts, topic.dlq, topic.results).
std::vector<KafkaTopicSpec> kafka_worker_topics(const std::string& topic, int partitions);

// The program (build/fixtures/pillbox-kafka-mock).
std::string kafka_mock_program();

// A loopback HOST:PORT where nothing listens (a closed port), for "the
// cluster cannot be reached".
std::string closed_kafka_bootstrap();

}  // namespace e2e
