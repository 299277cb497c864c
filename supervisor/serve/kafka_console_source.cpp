#include "supervisor/serve/kafka_console_source.h"

#include <utility>

namespace pillbox::serve {
namespace {

FleetNames names_of(const broker::KafkaBootstrap& bootstrap, const std::string& topic) {
  return {"Kafka", bootstrap.joined(), bootstrap.joined() + " " + broker::kafka_dlq_topic(topic), "topic " + topic,
          {"--kafka", bootstrap.joined(), "--topic", topic}};
}

}  // namespace

Expected<std::unique_ptr<KafkaSource>> KafkaSource::open(const broker::KafkaBootstrap& bootstrap,
                                                         const std::string& topic, FleetTrust trust) {
  auto quarantine = broker::KafkaQuarantine::open(bootstrap, topic);
  if (!quarantine) return Error{quarantine.error(), quarantine.error_code()};
  return std::unique_ptr<KafkaSource>(new KafkaSource(bootstrap, topic, std::move(*quarantine), std::move(trust)));
}

KafkaSource::KafkaSource(broker::KafkaBootstrap bootstrap, std::string topic, broker::KafkaQuarantine quarantine,
                         FleetTrust trust)
    : FleetSource(names_of(bootstrap, topic), std::move(trust)),
      bootstrap_(std::move(bootstrap)),
      topic_(std::move(topic)),
      quarantine_(std::move(quarantine)) {
  use(*quarantine_);
}

broker::FleetDeadLetters* KafkaSource::connect(ApiReply& error) {
  auto opened = broker::KafkaQuarantine::open(bootstrap_, topic_);
  if (!opened) {
    error = unreachable(opened.error());
    return nullptr;
  }
  quarantine_.emplace(std::move(*opened));
  return &*quarantine_;
}

Expected<std::unique_ptr<broker::FleetDeadLetters>> KafkaSource::open_apart() const {
  auto q = broker::KafkaQuarantine::open(bootstrap_, topic_);
  if (!q) return Error{q.error(), q.error_code()};
  return std::unique_ptr<broker::FleetDeadLetters>(std::make_unique<broker::KafkaQuarantine>(std::move(*q)));
}

}  // namespace pillbox::serve
