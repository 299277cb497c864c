#pragma once
// Reads a range of offsets of one partition of a Kafka topic, oldest first,
// as a tool reads it (the quarantine's T.dlq and T.dlq.state): a consumer
// that joins no group and commits nothing (assign(), never subscribe()), so
// what it reads moves no offset any worker sees. Read uncommitted: what a
// transaction left open holds is a claim like any record, and a read must
// not wait on it. See docs/distributed.md, Kafka.
//
// Every call is bounded (the cluster's answer within `timeout`); a range
// that could not be read to its end is an error that says where it stopped.
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>

#include "shared/status.h"
#include "supervisor/broker/kafka_config.h"
#include "supervisor/broker/kafka_message.h"

namespace RdKafka {
class KafkaConsumer;
}  // namespace RdKafka

namespace pillbox::broker {

struct KafkaWatermarks {
  std::int64_t low = 0;   // the first offset retention has kept
  std::int64_t high = 0;  // the offset the next record will get
};

class KafkaPartitionReader {
 public:
  // `client_id`: who reads ("pillbox-quarantine"), as the cluster logs it.
  static Expected<std::unique_ptr<KafkaPartitionReader>> open(const KafkaBootstrap& bootstrap,
                                                              const std::string& client_id,
                                                              std::chrono::milliseconds timeout = kKafkaConnectTimeout);
  // The same with librdkafka's properties as given (bootstrap.servers and
  // client.id among them: the worker's, with the user's own), the reader's
  // own set after them.
  static Expected<std::unique_ptr<KafkaPartitionReader>> open(const KafkaProperties& properties,
                                                              const KafkaBootstrap& bootstrap,
                                                              std::chrono::milliseconds timeout);
  ~KafkaPartitionReader();
  KafkaPartitionReader(const KafkaPartitionReader&) = delete;
  KafkaPartitionReader& operator=(const KafkaPartitionReader&) = delete;

  // The partitions of `topic`, found among all topics (naming one would
  // create it on a cluster that auto-creates: kafka_topics.h); 0 when the
  // cluster has no such topic. An error (kSetup) when it does not answer.
  Expected<int> partitions(const std::string& topic);
  Expected<KafkaWatermarks> watermarks(const std::string& topic, std::int32_t partition);
  // Records [from, to) of the partition, oldest first, each to `fn` (false:
  // stop), a value cut after `max_value` bytes (a hostile one does not
  // fill memory twice). Offsets retention removed, or none (compaction,
  // transaction markers), are skipped. An error when the cluster stops
  // answering before `to` is reached.
  Status read(const std::string& topic, std::int32_t partition, std::int64_t from, std::int64_t to,
              const std::function<bool(KafkaMessage&&)>& fn, std::size_t max_value = ~std::size_t{0});

  const KafkaBootstrap& bootstrap() const { return bootstrap_; }

 private:
  KafkaPartitionReader() = default;

  KafkaBootstrap bootstrap_;
  std::chrono::milliseconds timeout_{0};
  KafkaEvents events_;  // declared before the consumer, which calls it until destroyed
  std::unique_ptr<RdKafka::KafkaConsumer> consumer_;
};

}  // namespace pillbox::broker
