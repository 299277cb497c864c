#include "supervisor/broker/amqp_publisher.h"

#include <cstdio>
#include <thread>

#include "supervisor/io/random_hex.h"

namespace pillbox::broker {
namespace {

// A batch refused whole is sent this many times in all, 100 ms after the
// first, then twice as long each time (3.1 s in all).
constexpr int kRounds = 6;
constexpr std::chrono::milliseconds kFirstBackoff{100};

}  // namespace

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
  for (std::size_t i = 0; i < batch.size(); ++i) ids.push_back("pillbox-" + submit_id_ + "-" + std::to_string(++sent_));
  auto backoff = kFirstBackoff;
  for (int round = 1;; ++round) {
    for (std::size_t i = 0; i < batch.size(); ++i) {
      AmqpOutgoing m;
      m.body = batch[i].payload;
      m.message_id = ids[i];
      m.headers.push_back({"key", batch[i].key});
      if (auto s = connection_.publish(queue_, m); !s) return Error{s.message()};
    }
    auto s = connection_.wait_confirmed();
    if (s) return ids;
    // A quorum queue refuses every message while it has no leader: just
    // declared (its election still under way: seen on 2 busy cores), or
    // its nodes lost. A refused message is not in the queue, so a batch
    // refused whole is sent again, the same ids, backing off; a batch
    // refused in part is not (which ones went in is not known).
    const bool refused_whole =
        connection_.last_waited() == batch.size() && connection_.last_refused() == connection_.last_waited();
    if (!refused_whole || round == kRounds) {
      return Error{s.message() + (refused_whole ? " (refused " + std::to_string(round) + " times)" : "")};
    }
    std::this_thread::sleep_for(backoff);
    backoff *= 2;
  }
}

}  // namespace pillbox::broker
