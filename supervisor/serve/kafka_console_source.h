#pragma once
// The console over the fleet's quarantine on Kafka (pillbox serve --kafka
// BROKERS --topic T): the dead letters of the topic T.dlq (supervisor/
// broker/kafka_quarantine.h) as fleet_console_source.h shows any broker's.
// What is Kafka's: ids are P@O, its capabilities
// (KafkaQuarantine::kCapabilities: patches of the payload only, no replay
// outputs), and the connection's check: the cluster's metadata, which must
// still name T.dlq.
#include <memory>
#include <optional>
#include <string>

#include "shared/status.h"
#include "supervisor/broker/kafka_fleet_record.h"
#include "supervisor/broker/kafka_quarantine.h"
#include "supervisor/serve/fleet_console_source.h"

namespace pillbox::serve {

class KafkaSource final : public FleetSource {
 public:
  // Connects and finds T.dlq (KafkaQuarantine::open): the error says why
  // not (the cluster unreachable, no T.dlq).
  static Expected<std::unique_ptr<KafkaSource>> open(const broker::KafkaBootstrap& bootstrap, const std::string& topic,
                                                     FleetTrust trust = {});

  QuarantineCapabilities can() const override { return broker::KafkaQuarantine::kCapabilities; }
  Expected<std::string> checked_id(const std::string& text) const override {
    return broker::parse_kafka_record_id(text);
  }

 protected:
  broker::FleetDeadLetters* connect(ApiReply& error) override;
  void disconnect() override { quarantine_.reset(); }
  bool answers() override { return quarantine_ && quarantine_->answers(); }
  // librdkafka's client says no more than its calls' errors: a round trip
  // tells a request's failure (a missing record) from the cluster's.
  Link link() override { return answers() ? Link::kUp : Link::kBroken; }
  Expected<std::unique_ptr<broker::FleetDeadLetters>> open_apart() const override;

 private:
  KafkaSource(broker::KafkaBootstrap bootstrap, std::string topic, broker::KafkaQuarantine quarantine,
              FleetTrust trust);

  const broker::KafkaBootstrap bootstrap_;
  const std::string topic_;
  std::optional<broker::KafkaQuarantine> quarantine_;  // under the server's lock
};

}  // namespace pillbox::serve
