#pragma once
// The console over the fleet's quarantine on Redis (pillbox serve --redis
// URL --stream NAME): the dead letters of NAME:dlq (supervisor/broker/
// fleet_quarantine.h) as fleet_console_source.h shows any broker's. What is
// Redis's: entry ids, a connection that a PING checks, LOADING or BUSY
// answered 503 on a connection that is kept.
#include <memory>
#include <optional>
#include <string>

#include "shared/status.h"
#include "supervisor/broker/fleet_quarantine.h"
#include "supervisor/serve/fleet_console_source.h"

namespace pillbox::serve {

class RedisSource final : public FleetSource {
 public:
  // Connects and checks NAME's keys (FleetQuarantine::open): the error says
  // why not (Redis unreachable, a key of another type).
  static Expected<std::unique_ptr<RedisSource>> open(const broker::RedisAddress& address, const std::string& stream,
                                                     FleetTrust trust = {});

  QuarantineCapabilities can() const override { return broker::FleetQuarantine::kCapabilities; }
  Expected<std::string> checked_id(const std::string& text) const override { return broker::parse_fleet_id(text); }

 protected:
  broker::FleetDeadLetters* connect(ApiReply& error) override;
  void disconnect() override { fleet_.reset(); }
  bool answers() override;
  Link link() override;
  Expected<std::unique_ptr<broker::FleetDeadLetters>> open_apart() const override;

 private:
  RedisSource(broker::RedisAddress address, std::string stream, broker::FleetQuarantine fleet, FleetTrust trust);

  const broker::RedisAddress address_;
  const std::string stream_;
  std::optional<broker::FleetQuarantine> fleet_;  // under the server's lock
};

}  // namespace pillbox::serve
