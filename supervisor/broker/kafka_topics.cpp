#include "supervisor/broker/kafka_topics.h"

#include <librdkafka/rdkafka.h>

#include <memory>

namespace pillbox::broker {
namespace {

int timeout_ms() { return static_cast<int>(kKafkaConnectTimeout.count()); }

}  // namespace

Expected<std::optional<KafkaTopic>> find_kafka_topic(RdKafka::Handle& client, const KafkaBootstrap& bootstrap,
                                                     const KafkaEvents& events, const std::string& topic) {
  RdKafka::Metadata* raw = nullptr;
  // All topics: a request that names one would create it on a cluster
  // that auto-creates (kafka_topics.h).
  const RdKafka::ErrorCode err = client.metadata(true, nullptr, &raw, timeout_ms());
  std::unique_ptr<RdKafka::Metadata> metadata(raw);
  if (err != RdKafka::ERR_NO_ERROR) {
    client.poll(0);  // librdkafka's errors reach `events` only when served
    return Error{kafka_unreachable(bootstrap, events, err)};
  }
  for (const RdKafka::TopicMetadata* t : *metadata->topics()) {
    if (t->topic() != topic) continue;
    if (t->err() != RdKafka::ERR_NO_ERROR && t->err() != RdKafka::ERR_LEADER_NOT_AVAILABLE) {
      return Error{"Kafka at " + bootstrap.joined() + " answered for topic " + topic + ": " + RdKafka::err2str(t->err())};
    }
    KafkaTopic found{topic, static_cast<int>(t->partitions()->size()), 0};
    if (!t->partitions()->empty()) found.replication_factor = static_cast<int>(t->partitions()->front()->replicas()->size());
    return std::optional<KafkaTopic>(found);
  }
  return std::optional<KafkaTopic>();
}

Status create_kafka_topic(RdKafka::Handle& client, const KafkaBootstrap& bootstrap, const std::string& topic,
                          int partitions, int replication_factor) {
  // The C++ API has no admin calls: CreateTopics is librdkafka's C API, on
  // the same client.
  rd_kafka_t* rk = client.c_ptr();
  char why[512] = "";
  const std::string by_hand =
      ": create it by hand: " + kafka_create_topic_command(bootstrap, topic, partitions, replication_factor);
  std::unique_ptr<rd_kafka_NewTopic_t, decltype(&rd_kafka_NewTopic_destroy)> new_topic(
      rd_kafka_NewTopic_new(topic.c_str(), partitions, replication_factor, why, sizeof why), rd_kafka_NewTopic_destroy);
  if (!new_topic) return Status::error(std::string("cannot ask for topic ") + topic + ": " + why, ErrorCode::kUsage);
  std::unique_ptr<rd_kafka_AdminOptions_t, decltype(&rd_kafka_AdminOptions_destroy)> options(
      rd_kafka_AdminOptions_new(rk, RD_KAFKA_ADMIN_OP_CREATETOPICS), rd_kafka_AdminOptions_destroy);
  if (rd_kafka_AdminOptions_set_request_timeout(options.get(), timeout_ms(), why, sizeof why) ||
      rd_kafka_AdminOptions_set_operation_timeout(options.get(), timeout_ms(), why, sizeof why)) {
    return Status::error(std::string("librdkafka refused CreateTopics' timeouts: ") + why);
  }
  std::unique_ptr<rd_kafka_queue_t, decltype(&rd_kafka_queue_destroy)> queue(rd_kafka_queue_new(rk),
                                                                             rd_kafka_queue_destroy);
  rd_kafka_NewTopic_t* topics[] = {new_topic.get()};
  rd_kafka_CreateTopics(rk, topics, 1, options.get(), queue.get());
  // librdkafka answers by the request's timeout; the margin is its own.
  std::unique_ptr<rd_kafka_event_t, decltype(&rd_kafka_event_destroy)> event(
      rd_kafka_queue_poll(queue.get(), timeout_ms() * 2), rd_kafka_event_destroy);
  const std::string refused = "Kafka at " + bootstrap.joined() + " did not create topic " + topic + ": CreateTopics ";
  if (!event) return Status::error(refused + "had no answer" + by_hand);
  if (rd_kafka_event_error(event.get()) != RD_KAFKA_RESP_ERR_NO_ERROR) {
    std::string said = rd_kafka_event_error_string(event.get());
    if (rd_kafka_event_error(event.get()) == RD_KAFKA_RESP_ERR__TIMED_OUT) {
      // librdkafka's mock cluster names no controller and implements no
      // CreateTopics: the request waits for a controller that never comes.
      said += "; a cluster without CreateTopics, such as librdkafka's mock cluster, never answers";
    }
    return Status::error(refused + "failed (" + said + ")" + by_hand);
  }
  const rd_kafka_CreateTopics_result_t* result = rd_kafka_event_CreateTopics_result(event.get());
  std::size_t count = 0;
  const rd_kafka_topic_result_t** results = result ? rd_kafka_CreateTopics_result_topics(result, &count) : nullptr;
  if (count != 1) return Status::error(refused + "answered for " + std::to_string(count) + " topics" + by_hand);
  const rd_kafka_resp_err_t err = rd_kafka_topic_result_error(results[0]);
  if (err == RD_KAFKA_RESP_ERR_NO_ERROR || err == RD_KAFKA_RESP_ERR_TOPIC_ALREADY_EXISTS) return Status::ok();
  const char* message = rd_kafka_topic_result_error_string(results[0]);
  return Status::error(refused + "was refused (" + rd_kafka_err2name(err) + ": " +
                       (message ? message : rd_kafka_err2str(err)) + ")" + by_hand);
}

}  // namespace pillbox::broker
