#pragma once
// `pillbox doctor --amqp URL --queue NAME`: a RabbitMQ fleet's topology
// checked, and its dead-letter route proven rather than assumed, so that a
// broken binding or a missing permission is found before a poison message
// needs it (docs/distributed.md, "RabbitMQ: doctor").
//
//   connection   the broker reached, logged in, the vhost there;
//   dead-letter route  a canary (amqp_dead_letter.h: header pillbox-canary)
//                published to a queue of its own, NAME.doctor.ID, whose
//                x-message-ttl 0 and x-dead-letter-exchange NAME.dlx have
//                the broker expire it into NAME.dlx at once; it must arrive
//                in NAME.dlq (read from its end, offset "next") within the
//                wait. Not through NAME itself: there the canary would wait
//                behind NAME's backlog (a quorum queue expires messages only
//                at its head) or be taken by a worker. That NAME's dead
//                letters go to NAME.dlx is its argument, checked next. The
//                canary stays in NAME.dlq (a stream cannot delete one);
//                is_canary tells it from a dead letter. This check runs first:
//                nothing before it declares or binds, so it tests the route
//                as the workers find it.
//   work queue   NAME exists and is what a worker with these settings
//                declares (quorum, x-delivery-limit, x-dead-letter-exchange
//                NAME.dlx, at least once where the broker has it): declared
//                again with those arguments, which changes nothing when they
//                match and is refused, explained, when they do not. Never
//                created here: a missing NAME is said.
#include <chrono>
#include <cstdint>
#include <string>
#include <vector>

#include "supervisor/broker/amqp_connection.h"
#include "supervisor/ops/doctor.h"

namespace pillbox::broker {

struct AmqpDoctorSettings {
  AmqpAddress address;
  std::string queue;                // NAME
  std::int64_t delivery_limit = 0;  // what the workers declare (amqp_topology.h: worker_delivery_limit)
  std::chrono::milliseconds canary_wait{10'000};
};

// The checks above, in order; a failed connection ends them (the others
// are not run, and say so).
std::vector<DoctorCheck> check_amqp_fleet(const AmqpDoctorSettings& settings);

}  // namespace pillbox::broker
