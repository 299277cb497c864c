#include "supervisor/broker/amqp_publisher.h"

#include <cstdio>

#include "supervisor/io/random_hex.h"

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
  auto hex = random_hex(8);
  if (!hex) return Error{"cannot make message ids: " + hex.error()};
  return AmqpPublisher(connection, queue, *hex);
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
