#include "supervisor/broker/kafka_worker_topics.h"

#include <librdkafka/rdkafkacpp.h>

#include <memory>
#include <vector>

#include "supervisor/broker/kafka_attempt_entry.h"
#include "supervisor/broker/kafka_dead_letter.h"
#include "supervisor/broker/kafka_result.h"
#include "supervisor/broker/kafka_topics.h"

namespace pillbox::broker {

Expected<KafkaWorkerTopics> check_kafka_worker_topics(const KafkaBootstrap& bootstrap, const std::string& topic,
                                                      bool results, bool create) {
  KafkaEvents events;
  auto conf = kafka_conf(bootstrap, "pillbox-worker", events);
  if (!conf) return Error{conf.error()};
  std::string why;
  std::unique_ptr<RdKafka::Producer> client(RdKafka::Producer::create(conf->get(), why));
  if (!client) return Error{"cannot start a Kafka client: " + why};
  auto source = find_kafka_topic(*client, bootstrap, events, topic);
  if (!source) return Error{source.error(), source.error_code()};
  if (!*source) {
    return Error::usage("topic " + topic + " does not exist on Kafka at " + bootstrap.joined() +
                        ": the worker reads its tasks there. Create it (" +
                        kafka_create_topic_command(bootstrap, topic, 6, -1) +
                        ") or submit to it with pillbox submit --kafka ... --create-topics");
  }
  KafkaWorkerTopics out;
  out.partitions = (*source)->partitions;
  std::vector<std::pair<std::string, std::string>> needed = {
      {attempt_log_topic(topic),
       "its attempt log: each record's attempts are counted there; cleanup.policy=delete, not compacted (a record "
       "has several entries), its retention at least " + topic + "'s"},
      {kafka_dlq_topic(topic), "its dead letters"}};
  if (results) needed.emplace_back(kafka_results_topic(topic), "its ok results (--no-results: none)");
  for (const auto& [name, what] : needed) {
    auto found = find_kafka_topic(*client, bootstrap, events, name);
    if (!found) return Error{found.error(), found.error_code()};
    if (!*found) {
      if (!create) {
        return Error::usage("topic " + name + " (" + what + ") does not exist on Kafka at " + bootstrap.joined() +
                            ": create it with " + std::to_string(out.partitions) + (out.partitions == 1 ? " partition" : " partitions") + ", as " + topic +
                            " has (" + kafka_create_topic_command(bootstrap, name, out.partitions, -1) +
                            "), or start the worker with --create-topics");
      }
      if (Status s = create_kafka_topic(*client, bootstrap, name, out.partitions, -1); !s) {
        return Error{s.message(), s.code()};
      }
      out.created.push_back(name);
      continue;
    }
    if ((*found)->partitions < out.partitions) {
      return Error::usage("topic " + name + " (" + what + ") has " + std::to_string((*found)->partitions) +
                          " partitions and " + topic + " has " + std::to_string(out.partitions) +
                          ": what pillbox writes about a record of partition p goes to its partition p. Add "
                          "partitions: kafka-topics.sh --bootstrap-server " + bootstrap.joined() + " --alter --topic " +
                          name + " --partitions " + std::to_string(out.partitions));
    }
  }
  return out;
}

}  // namespace pillbox::broker
