#include "supervisor/broker/amqp_publisher.h"

#include <sys/random.h>

#include <cstdio>

namespace pillbox::broker {

Expected<AmqpPublisher> AmqpPublisher::open(AmqpConnection& connection, const std::string& queue,
                                            std::optional<AmqpTopology>& declared) {
  declared.reset();
  if (auto found = connection.check_queue(queue); !found) {
    if (!connection.refusal() || connection.refusal()->code != AMQP_NOT_FOUND) return Error{found.error(), found.error_code()};
    auto topology = declare_topology(connection, AmqpTopologySettings{.queue = queue});
    if (!topology) return Error{topology.error()};
    declared = std::move(*topology);
  }
  if (auto s = connection.confirm_publishes(); !s) return Error{s.message()};
  unsigned char random[8];
  if (::getrandom(random, sizeof random, 0) != static_cast<ssize_t>(sizeof random)) {
    return Error{"cannot make message ids: getrandom failed"};
  }
  char hex[17];
  for (std::size_t i = 0; i < sizeof random; ++i) std::snprintf(hex + 2 * i, 3, "%02x", random[i]);
  return AmqpPublisher(connection, queue, hex);
}

Expected<std::vector<std::string>> AmqpPublisher::add(const std::vector<Task>& batch) {
  std::vector<std::string> ids;
  ids.reserve(batch.size());
  for (const Task& t : batch) {
    AmqpOutgoing m;
    m.body = t.payload;
    m.message_id = "pillbox-" + submit_id_ + "-" + std::to_string(++sent_);
    m.headers.push_back({"key", t.key});
    if (auto s = connection_.publish(queue_, m); !s) return Error{s.message()};
    ids.push_back(std::move(m.message_id));
  }
  if (auto s = connection_.wait_confirmed(); !s) return Error{s.message()};
  return ids;
}

}  // namespace pillbox::broker
