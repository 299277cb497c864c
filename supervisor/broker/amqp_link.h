#pragma once
// One RabbitMQ connection on a thread of its own: the link of
// connection_link.h (the thread, the queue, the answers and the backoff,
// written once with Redis's) over an AmqpConnection. rabbitmq-c is
// synchronous; through the link, the dispatcher's thread never waits for
// the broker.
//
// Every connection, the first included, runs the link's Setup before any
// work (confirm_publishes(), consume(queue, prefetch)): a consume belongs to
// its connection, so a new connection must consume again. While nothing is
// posted, the idle work runs again and again: the consume loop, which waits
// in next(timeout, wake_fd()) and returns at once when work is posted or the
// link stops.
//
// Lost: a work left the connection broken (the owner hears the error that
// broke it). Back: a new connection is open and its Setup succeeded. The
// work that broke runs again on the new connection, so it must be safe to
// repeat; a delivery tag belongs to the connection it came on: work that
// acknowledges compares the message's connection with id() (an older
// connection's messages the broker has requeued already). A
// connection.blocked (a memory or disk alarm) is not a loss: RabbitMQ has
// nothing like Redis's "cannot serve now".
//
// Publish with confirms on a link that does not consume: a delivery that
// comes while AmqpConnection::wait_confirmed() waits is an unexpected frame
// to it, and it ends the connection.
#include <memory>
#include <string>

#include "shared/status.h"
#include "supervisor/broker/amqp_connection.h"
#include "supervisor/broker/connection_link.h"

namespace pillbox::broker {

extern template class ConnectionLink<AmqpConnection>;

class AmqpLink final : public ConnectionLink<AmqpConnection> {
 public:
  // Connects and runs `setup` (when given) once, now: failing that is an
  // error for the caller (it says what to check), not something to retry
  // forever. `name` names the link in the owner's notices.
  static Expected<std::unique_ptr<AmqpLink>> open(const AmqpAddress& address, std::string name, StateChange on_state,
                                                  Setup setup);

 private:
  AmqpLink(const AmqpAddress& address, std::string name, StateChange on_state, Setup setup, AmqpConnection connection);
};

}  // namespace pillbox::broker
