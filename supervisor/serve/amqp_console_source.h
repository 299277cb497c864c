#pragma once
// The console over the fleet's quarantine on RabbitMQ (pillbox serve --amqp
// URL --queue NAME): the dead letters of the stream NAME.dlq (supervisor/
// broker/amqp_quarantine.h) as fleet_console_source.h shows any broker's.
// What is RabbitMQ's: ids are offsets, the queue's capabilities
// (AmqpQuarantine::kCapabilities: no replay outputs; minimize where it is
// built), a connection checked by a passive declare of NAME.dlq, and the
// URL's password, which the console never shows: its pages, replies and
// jobs' command lines name the broker as amqp://USER@HOST:PORT/VHOST, and
// its jobs get the password in their environment (kAmqpPasswordEnv), which
// only their user and root can read, never on their command line, which
// every local user can.
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "shared/status.h"
#include "supervisor/broker/amqp_quarantine.h"
#include "supervisor/serve/fleet_console_source.h"

namespace pillbox::serve {

class AmqpSource final : public FleetSource {
 public:
  // Connects and checks NAME.dlq (AmqpQuarantine::open): the error says why
  // not (RabbitMQ unreachable, no NAME.dlq, one of another type).
  static Expected<std::unique_ptr<AmqpSource>> open(const broker::AmqpAddress& address, const std::string& queue,
                                                    FleetTrust trust = {});

  QuarantineCapabilities can() const override { return broker::AmqpQuarantine::kCapabilities; }
  Expected<std::string> checked_id(const std::string& text) const override {
    return broker::parse_amqp_record_id(text);
  }
  std::vector<std::pair<std::string, std::string>> cli_source_env() const override;

 protected:
  broker::FleetDeadLetters* connect(ApiReply& error) override;
  void disconnect() override { quarantine_.reset(); }
  bool answers() override;
  Link link() override;
  Expected<std::unique_ptr<broker::FleetDeadLetters>> open_apart() const override;

 private:
  AmqpSource(broker::AmqpAddress address, std::string queue, broker::AmqpQuarantine quarantine, FleetTrust trust);

  const broker::AmqpAddress address_;
  const std::string queue_;
  std::optional<broker::AmqpQuarantine> quarantine_;  // under the server's lock
};

}  // namespace pillbox::serve
