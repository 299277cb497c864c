#pragma once
// The attempt log of a Kafka topic T (T.pillbox-attempts) on the cluster:
// its reader, which reads one partition from the commit's N up to where it
// ended when the read began, for the new owner of the partition to fold
// (kafka_attempts.h). The worker calls it inside a rebalance (the assign),
// never while tasks wait on it.
//
// Its entries (kafka_attempt_entry.h: attempt_entry_record) are written by
// the worker's producer (kafka_producer.h: idempotent, acks=all), so that a
// start entry is on every in-sync replica before the payload it counts
// reaches a child. The topic is checked, and made with --create-topics, by
// kafka_worker_topics.h.
//
// The reader is a consumer with no group (kafka_partition_reader.h):
// assign(), never subscribe(), no commits; read uncommitted, so that a
// transaction someone left open in the log cannot hold a read back (what
// it holds is a claim, as any entry).
#include <chrono>
#include <cstdint>
#include <limits>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "shared/status.h"
#include "supervisor/broker/kafka_attempt_entry.h"
#include "supervisor/broker/kafka_message.h"
#include "supervisor/broker/kafka_partition_reader.h"

namespace pillbox::broker {

struct AttemptLogSettings {
  std::string brokers;  // the bootstrap list, HOST:PORT[,...]
  std::string topic;    // T (the log is attempt_log_topic(T))
  // The most a read waits for its window.
  std::chrono::milliseconds timeout{30'000};
  // More librdkafka properties (security.protocol, sasl.*, ...), set first.
  std::vector<std::pair<std::string, std::string>> properties;
};

// What a read of one partition of the attempt log got.
struct AttemptLogRead {
  std::vector<KafkaMessage> entries;  // in log order; values over kMaxAttemptEntryBytes cut (unreadable all the same)
  std::int64_t from = 0;              // where the read began
  std::int64_t end = 0;               // the high watermark when it began: the read stopped there
  // T's partition's high watermark, asked after `end`: every entry a
  // worker wrote before `end` is about a record below it (a record is read
  // before its entries are written). Not known (the cluster did not say):
  // the largest offset, every entry kept.
  std::int64_t source_end = std::numeric_limits<std::int64_t>::max();
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
  AttemptLogReader(AttemptLogSettings settings, std::unique_ptr<KafkaPartitionReader> reader);

  AttemptLogSettings settings_;
  std::unique_ptr<KafkaPartitionReader> reader_;
};

}  // namespace pillbox::broker
