#pragma once
// The attempt log of a Kafka topic T (T.pillbox-attempts) on the cluster:
// its writer, whose entries (kafka_attempt_entry.h) are durable when write()
// returns, and its reader, which reads one partition from the commit's N up
// to where it ended when the read began, for the new owner of the partition
// to fold (kafka_attempts.h). librdkafka's C++ API (rdkafkacpp.h); the
// worker calls these on its broker thread, never the dispatcher's.
//
// The writer is an idempotent producer with acks=all: a start entry is on
// every in-sync replica before the payload it counts reaches a child, and a
// retry inside librdkafka never writes an entry twice. A worker writes a
// turn's starts together: write() takes them all and waits for all their
// delivery reports, one round trip.
//
// The reader is a consumer with no group: assign(), never subscribe(), no
// commits (the group.id librdkafka asks for is never joined); read
// uncommitted, so that a transaction someone left open in the log cannot
// hold a read back (what it holds is a claim, as any entry).
#include <chrono>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "shared/status.h"
#include "supervisor/broker/kafka_attempt_entry.h"
#include "supervisor/broker/kafka_message.h"

namespace RdKafka {
class Producer;
class KafkaConsumer;
}  // namespace RdKafka

namespace pillbox::broker {

struct AttemptLogSettings {
  std::string brokers;  // the bootstrap list, HOST:PORT[,...]
  std::string topic;    // T (the log is attempt_log_topic(T))
  // The most a write waits for its delivery reports, a read for its window.
  std::chrono::milliseconds timeout{30'000};
  // More librdkafka properties (security.protocol, sasl.*, ...), set first.
  std::vector<std::pair<std::string, std::string>> properties;
};

// The attempt log exists and has a partition for each of T's: what to do
// when it does not (the command that creates it, with T's partition count).
Status check_attempt_log_topic(RdKafka::Producer& handle, const AttemptLogSettings& settings);

// Where each entry of a write landed.
struct AttemptWritten {
  std::int64_t log_offset = -1;  // its offset in the attempt log's partition
  std::string error;             // "" when written; else why not (it may still have been written)
};

class AttemptLogWriter {
 public:
  // Connects and checks the topics (check_attempt_log_topic).
  static Expected<std::unique_ptr<AttemptLogWriter>> open(const AttemptLogSettings& settings);
  ~AttemptLogWriter();
  AttemptLogWriter(const AttemptLogWriter&) = delete;
  AttemptLogWriter& operator=(const AttemptLogWriter&) = delete;

  // Writes `entries` (each to its partition) and returns, in their order,
  // where each landed, once every one has its delivery report or the
  // timeout passed. An entry with an error may have been written all the
  // same (its report was not heard): a start so reported is given its end
  // (a release) before its record runs, or its delivery counts as lost.
  std::vector<AttemptWritten> write(const std::vector<AttemptEntry>& entries);

  // Not empty when the producer failed for good (an idempotent producer's
  // fatal error): open another writer.
  std::string fatal_error() const;

  struct Reports;  // the delivery reports, by write (kafka_attempt_log.cpp)

 private:
  AttemptLogWriter(AttemptLogSettings settings, std::unique_ptr<Reports> reports,
                   std::unique_ptr<RdKafka::Producer> producer);

  AttemptLogSettings settings_;
  std::unique_ptr<Reports> reports_;  // outlives producer_, whose callbacks use it
  std::unique_ptr<RdKafka::Producer> producer_;
};

// What a read of one partition of the attempt log got.
struct AttemptLogRead {
  std::vector<KafkaMessage> entries;  // in log order; values over kMaxAttemptEntryBytes cut (unreadable all the same)
  std::int64_t from = 0;              // where the read began
  std::int64_t end = 0;               // the high watermark when it began: the read stopped there
  std::string note;                   // when it did not begin at the N asked for: where, and why
};

class AttemptLogReader {
 public:
  static Expected<std::unique_ptr<AttemptLogReader>> open(const AttemptLogSettings& settings);
  ~AttemptLogReader();
  AttemptLogReader(const AttemptLogReader&) = delete;
  AttemptLogReader& operator=(const AttemptLogReader&) = delete;

  // The attempt log's partition `partition` from `from` (nullopt: its
  // beginning) to its high watermark as of this call. A `from` the log no
  // longer or not yet holds (retention removed it; metadata that is not
  // this log's) reads from the log's beginning, and the note says so.
  Expected<AttemptLogRead> read(std::int32_t partition, std::optional<std::int64_t> from);

 private:
  AttemptLogReader(AttemptLogSettings settings, std::unique_ptr<RdKafka::KafkaConsumer> consumer);

  AttemptLogSettings settings_;
  std::unique_ptr<RdKafka::KafkaConsumer> consumer_;
};

}  // namespace pillbox::broker
