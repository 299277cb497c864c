#include "supervisor/broker/broker_link.h"

#include <cstdint>

namespace pillbox::broker {

// Redis is back once it answers a command: a connection that opens, or work
// that sends nothing (a renewal with nothing to renew), says nothing of a
// Redis that still refuses to serve.
template <>
struct LinkRules<RedisConnection> {
  using Mark = std::uint64_t;  // replies received
  static Mark mark(const RedisConnection& redis) { return redis.answered(); }
  static BrokerShowed after(const RedisConnection& redis, Mark before) {
    if (redis.broken()) return BrokerShowed::kLost;
    if (redis.busy()) return BrokerShowed::kCannotServeNow;
    return redis.answered() != before ? BrokerShowed::kServes : BrokerShowed::kNothing;
  }
  // A restarted Redis accepts connections while it still answers LOADING.
  static constexpr bool kServesOnceConnected = false;
  static std::string lost(const RedisConnection& redis, const std::string& link_name, BrokerShowed showed) {
    return redis.address().describe() + " (" + link_name + "): " +
           (showed == BrokerShowed::kCannotServeNow ? "it answers that it cannot serve now (loading, busy or full)"
                                                    : "the connection was lost");
  }
};

template class ConnectionLink<RedisConnection>;

Expected<std::unique_ptr<BrokerLink>> BrokerLink::open(const RedisAddress& address, std::string name,
                                                       StateChange on_state) {
  auto connection = RedisConnection::open(address);
  if (!connection) return Error{connection.error(), connection.error_code()};
  std::unique_ptr<BrokerLink> link(new BrokerLink(address, std::move(name), std::move(on_state), std::move(*connection)));
  if (!link->start()) return Error{"cannot create an eventfd for the Redis link"};
  return link;
}

BrokerLink::BrokerLink(const RedisAddress& address, std::string name, StateChange on_state, RedisConnection connection)
    : ConnectionLink(std::move(name), std::move(on_state), [address] { return RedisConnection::open(address); },
                     Setup{}, std::move(connection)) {}

}  // namespace pillbox::broker
