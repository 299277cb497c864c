#pragma once
// One Redis connection on a thread of its own (connection_link.h: the
// thread, the queue, the answers and the backoff), so a slow or restarting
// Redis never stalls the dispatcher. Posted work runs in order on the
// link's thread; what it returns runs on the owner's thread in drain(),
// signalled through wait_fd().
//
// On a broken connection, or a "cannot serve now" reply (LOADING, OOM, ...),
// the link backs off (100 ms doubling to 5 s), reconnects when needed and
// runs the same work again: work must be safe to repeat (stream_protocol.h's
// steps are). The owner hears once that Redis is lost and once that it is
// back, i.e. answering commands again (a restarted Redis accepts connections
// while it still answers LOADING).
//
// Periodic work (claim renewal) runs on the link's own clock, so it happens
// even while every slot is busy and the dispatcher has no reason to turn.
#include <memory>
#include <string>

#include "shared/status.h"
#include "supervisor/broker/connection_link.h"
#include "supervisor/broker/redis_connection.h"

namespace pillbox::broker {

extern template class ConnectionLink<RedisConnection>;

class BrokerLink final : public ConnectionLink<RedisConnection> {
 public:
  // Connects once, now: an unreachable server at the start is an error for
  // the caller (it says what to check), not something to retry forever.
  static Expected<std::unique_ptr<BrokerLink>> open(const RedisAddress& address, std::string name,
                                                    StateChange on_state);

 private:
  BrokerLink(const RedisAddress& address, std::string name, StateChange on_state, RedisConnection connection);
};

}  // namespace pillbox::broker
