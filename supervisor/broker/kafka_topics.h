#pragma once
// A Kafka cluster's topics as pillbox's clients see them: whether one
// exists (and its partitions), and making one when an operator asked for it
// (--create-topics). See docs/distributed.md, Kafka.
//
// Asking a cluster for one topic by name makes it create that topic when its
// auto.create.topics.enable is on (Kafka's default) and the client speaks a
// Metadata version older than 4, which cannot say "do not": librdkafka's mock
// cluster speaks only versions 0 to 2 and creates every topic a client names.
// So a topic is looked for in the list of all topics, which creates none.
#include <librdkafka/rdkafkacpp.h>

#include <optional>
#include <string>

#include "shared/status.h"
#include "supervisor/broker/kafka_config.h"

namespace pillbox::broker {

struct KafkaTopic {
  std::string name;
  int partitions = 0;
  int replication_factor = 0;  // the first partition's replicas
};

// `topic` as the cluster has it, or none when it has no such topic. An error
// (ErrorCode::kSetup) when the cluster does not answer within
// kKafkaConnectTimeout (kafka_unreachable() says why), or names the topic
// with an error of its own (e.g. not authorized). Serves `client`'s events
// (poll) when the cluster does not answer: a producer's or admin client's
// handle, not a KafkaConsumer's, whose poll would take its records.
Expected<std::optional<KafkaTopic>> find_kafka_topic(RdKafka::Handle& client, const KafkaBootstrap& bootstrap,
                                                     const KafkaEvents& events, const std::string& topic);

// Admin CreateTopics for `topic`: `partitions`, and `replication_factor`
// replicas of each (-1: the broker's default.replication.factor). Waits for
// the controller's answer (kKafkaConnectTimeout at most). An error says what
// the cluster said and how to create the topic by hand; one that exists
// already (made meanwhile) is not an error.
Status create_kafka_topic(RdKafka::Handle& client, const KafkaBootstrap& bootstrap, const std::string& topic,
                          int partitions, int replication_factor);

}  // namespace pillbox::broker
