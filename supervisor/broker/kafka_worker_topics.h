#pragma once
// The topics a Kafka worker of topic T needs, checked before it joins its
// group (docs/distributed.md, Kafka): T itself, its attempt log
// T.pillbox-attempts, its dead letters T.dlq and, with results, T.results.
// What pillbox writes about a record of T's partition p goes to partition
// p of each (co-partitioned), so each needs at least T's partitions. A
// missing one is an error that says how to make it, unless
// --create-topics (Admin CreateTopics, with T's partition count). None is
// ever made by naming it (kafka_topics.h: some clusters, and librdkafka's
// mock, create a topic a client merely names).
#include <string>

#include "shared/status.h"
#include "supervisor/broker/kafka_config.h"

namespace pillbox::broker {

struct KafkaWorkerTopics {
  int partitions = 0;  // T's
  std::vector<std::string> created;  // with --create-topics: those made now
};

// `results`: T.results is needed too. Usage errors (ErrorCode::kUsage)
// for a topic missing or too small; setup errors for a cluster that cannot
// be reached or refuses CreateTopics.
Expected<KafkaWorkerTopics> check_kafka_worker_topics(const KafkaBootstrap& bootstrap, const std::string& topic,
                                                      bool results, bool create);

}  // namespace pillbox::broker
