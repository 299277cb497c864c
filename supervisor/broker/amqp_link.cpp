#include "supervisor/broker/amqp_link.h"

namespace pillbox::broker {

// A RabbitMQ connection that opened and ran its Setup (a round trip to the
// broker at least) serves: back then, not at the next work, which may be a
// consume loop that waits seconds for a message.
template <>
struct LinkRules<AmqpConnection> {
  struct Mark {};
  static Mark mark(const AmqpConnection&) { return {}; }
  static BrokerShowed after(const AmqpConnection& rabbit, Mark) {
    return rabbit.broken() ? BrokerShowed::kLost : BrokerShowed::kNothing;
  }
  static constexpr bool kServesOnceConnected = true;
  static std::string lost(const AmqpConnection& rabbit, const std::string& link_name, BrokerShowed) {
    const std::string& why = rabbit.why_broken();
    return link_name + " link: " +
           (why.empty() ? "RabbitMQ at " + rabbit.address().describe() + ": the connection was lost" : why);
  }
};

template class ConnectionLink<AmqpConnection>;

Expected<std::unique_ptr<AmqpLink>> AmqpLink::open(const AmqpAddress& address, std::string name, StateChange on_state,
                                                   Setup setup) {
  auto connection = AmqpConnection::open(address);
  if (!connection) return Error{connection.error(), connection.error_code()};
  if (setup) {
    if (auto ready = setup(*connection); !ready) return Error{ready.message(), ready.code()};
  }
  std::unique_ptr<AmqpLink> link(
      new AmqpLink(address, std::move(name), std::move(on_state), std::move(setup), std::move(*connection)));
  if (!link->start()) return Error{"cannot create an eventfd for the RabbitMQ link"};
  return link;
}

AmqpLink::AmqpLink(const AmqpAddress& address, std::string name, StateChange on_state, Setup setup,
                   AmqpConnection connection)
    : ConnectionLink(std::move(name), std::move(on_state), [address] { return AmqpConnection::open(address); },
                     std::move(setup), std::move(connection)) {}

}  // namespace pillbox::broker
