#pragma once
// pillbox submit's Kafka back end: each task one record of the topic: its
// key the task's key, its value the payload's exact bytes, its header
// `pillbox-submit` this submit's id (16 hex digits, random). An idempotent
// producer (acks=all: a record counts once every in-sync replica has it;
// a retry never writes it twice), partitioned by murmur2 of the key as
// Java clients do, so a key lands where other clients put it. add() returns
// once every record of the batch is acknowledged. See docs/distributed.md,
// Kafka.
//
// A topic that does not exist is an error that says how to make it, unless
// the settings ask for it to be created (Admin CreateTopics); no record is
// produced before the topic is found (kafka_topics.h: naming a missing one
// would make some clusters create it).
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "shared/status.h"
#include "supervisor/broker/kafka_config.h"
#include "supervisor/broker/task_submit.h"

namespace pillbox::broker {

// submit's default --max-payload on Kafka: a default broker takes record
// batches of at most kKafkaBrokerMessageMaxBytes (1048588,
// kafka_record_fit.h); 48 588 bytes of it are left for the key, the header
// and the batch's framing.
inline constexpr std::size_t kDefaultMaxKafkaPayload = 1000000;
// --create-topics' default partition count: as many workers of a group
// as can work at once.
inline constexpr int kDefaultKafkaPartitions = 6;

struct KafkaPublisherSettings {
  KafkaBootstrap bootstrap;
  std::string topic;
  // The largest payload add() is given: the producer's own limit on a
  // record (message.max.bytes) is raised above the broker's default only
  // for a larger one.
  std::size_t max_payload = kDefaultMaxKafkaPayload;
  bool create_topic = false;  // Admin CreateTopics when it is missing
  int partitions = kDefaultKafkaPartitions;
  int replication_factor = -1;  // -1: the broker's default.replication.factor
};

class KafkaPublisher : public TaskPublisher {
 public:
  // Connects (kKafkaConnectTimeout at most), finds the topic (or creates
  // it, as the settings say). `created`: set when it was created.
  static Expected<std::unique_ptr<KafkaPublisher>> open(const KafkaPublisherSettings& settings, bool& created);
  ~KafkaPublisher() override;
  KafkaPublisher(const KafkaPublisher&) = delete;
  KafkaPublisher& operator=(const KafkaPublisher&) = delete;

  // Ids "PARTITION:OFFSET", as the cluster acknowledged each record.
  Expected<std::vector<std::string>> add(const std::vector<Task>& batch) override;

  int partitions() const { return partitions_; }

 private:
  class Reports;
  KafkaPublisher() = default;

  KafkaBootstrap bootstrap_;
  std::string topic_;
  std::string submit_id_;
  int partitions_ = 0;
  std::size_t max_record_ = 0;  // the producer's message.max.bytes
  // Declared before the producer, which calls them until it is destroyed.
  KafkaEvents events_;
  std::unique_ptr<Reports> reports_;
  std::unique_ptr<RdKafka::Producer> producer_;
};

}  // namespace pillbox::broker
