#pragma once
// pillbox submit's RabbitMQ back end: each task one persistent message to
// the work queue NAME (the default exchange, routing key NAME): its body the
// payload's exact bytes, its header `key` the task's key, its message_id
// unique (pillbox-<16 hex of this submit>-<n>). Published with publisher
// confirms: add() returns once the broker confirmed every message of the
// batch (for a quorum queue: written on a majority of its nodes). See
// docs/distributed.md, RabbitMQ.
//
// A batch the broker refuses whole (basic.nack: a quorum queue without a
// leader yet) is sent again, up to 6 times in 3.1 s; one refused in part
// is an error (which messages went in is not known).
//
// A queue that does not exist is declared with the topology pillbox wants
// (amqp_topology.h, default settings); one that exists is left as it is:
// the worker checks it and explains a mismatch.
#include <string>
#include <vector>

#include "shared/status.h"
#include "supervisor/broker/amqp_connection.h"
#include "supervisor/broker/amqp_topology.h"
#include "supervisor/broker/task_submit.h"

namespace pillbox::broker {

// RabbitMQ's default max_message_size (3.8 and later): submit's default
// --max-payload on RabbitMQ. A larger message closes the channel.
inline constexpr std::size_t kDefaultMaxAmqpPayload = 128u << 20;

class AmqpPublisher : public TaskPublisher {
 public:
  // Finds (or declares) the queue and turns publisher confirms on.
  // `declared`: set when the queue was not there and was declared.
  static Expected<AmqpPublisher> open(AmqpConnection& connection, const std::string& queue,
                                      std::optional<AmqpTopology>& declared);
  // The message ids of the batch's messages.
  Expected<std::vector<std::string>> add(const std::vector<Task>& batch) override;

 private:
  AmqpPublisher(AmqpConnection& connection, std::string queue, std::string submit_id)
      : connection_(connection), queue_(std::move(queue)), submit_id_(std::move(submit_id)) {}

  AmqpConnection& connection_;
  std::string queue_;
  std::string submit_id_;  // 16 hex digits, random: this submit's part of each message id
  std::uint64_t sent_ = 0;
};

}  // namespace pillbox::broker
