#pragma once
// The queues and exchange a RabbitMQ fleet runs on (docs/distributed.md,
// "RabbitMQ: the topology"), declared by pillbox or checked, so that the
// broker itself enforces what pillbox promises:
//
//   NAME       the work: a durable quorum queue. The broker counts each
//              delivery (x-delivery-count), a worker killed mid-task
//              included, and dead-letters a message past x-delivery-limit
//              itself (reason delivery_limit): poison that kills every
//              worker still ends.
//   NAME.dlx   a fanout exchange, NAME's x-dead-letter-exchange;
//   NAME.dlq   the dead letters: a stream queue bound to NAME.dlx, read by
//              offset, so that listing them neither consumes, reorders nor
//              re-counts them.
//   NAME.delay.MS  a retry's wait, one queue per delay (MS a power of two
//              of milliseconds, declared when first used): x-message-ttl
//              MS, dead-lettering to NAME (the default exchange, routing
//              key NAME). The broker moves a message back when its time is
//              up: no consumer holds it, no slot waits for it. A queue per
//              delay, since a queue expires messages only at its head (a
//              long wait in front would hold a short one behind).
//
// Where the broker has it (3.10 and later), NAME dead-letters at least
// once (x-dead-letter-strategy at-least-once, which needs x-overflow
// reject-publish): a dead letter is not lost between the two queues.
//
// A queue that exists with other arguments is never changed (it may hold
// messages): the broker's PRECONDITION_FAILED becomes a sentence that names
// the argument, says why pillbox needs it and what to do.
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "shared/status.h"
#include "supervisor/broker/amqp_connection.h"

namespace pillbox::broker {

struct AmqpQueueNames {
  std::string work;  // NAME
  std::string dlx;   // NAME.dlx
  std::string dlq;   // NAME.dlq
};
AmqpQueueNames amqp_queue_names(const std::string& queue);

struct AmqpTopologySettings {
  std::string queue;  // NAME
  // Deliveries the broker allows before it dead-letters a message itself:
  // the last resort for a payload that kills the worker's supervisor, so
  // above the worker's own --max-attempts.
  std::int64_t delivery_limit = 10;
};

// The x-delivery-limit of workers that dead-letter after `max_attempts`
// charged failures: the default, or above their limit. The broker's limit
// is the last resort: it counts deliveries that ended unsettled (a worker
// killed, a connection lost), which workers do not count against a
// message held beside the one that killed them (amqp_entry.h), so a
// message that kills every worker's supervisor is dead-lettered by the
// broker, without a record.
std::int64_t worker_delivery_limit(std::uint32_t max_attempts);

// What was declared.
struct AmqpTopology {
  AmqpQueueNames names;
  bool at_least_once = false;  // x-dead-letter-strategy at-least-once (broker 3.10+)
  std::string server_version;
};

// Whether a broker of this version ("3.10.8") dead-letters at least once.
bool supports_at_least_once(const std::string& server_version);

// A stream queue's x-arguments: NAME.dlq's, and the state log's
// (amqp_state_log.h), declared alike wherever they are declared.
std::vector<AmqpField> stream_queue_arguments();

// NAME's x-arguments (quorum, delivery limit, dead-letter exchange, and
// at-least-once where `at_least_once`).
std::vector<AmqpField> work_queue_arguments(const AmqpTopologySettings& settings, bool at_least_once);

// The longest name a work queue may have: pillbox names queues after it,
// the longest NAME.dlq.lock.ID (an offset of up to 18 digits: 28 bytes
// more), and RabbitMQ takes names of up to 255 bytes.
inline constexpr std::size_t kLongestQueueName = 255 - 28;
// Whether `queue` can be a work queue (1 to kLongestQueueName bytes, no
// NUL); a usage error that says why.
Status check_queue_name(const std::string& queue);

// The delay queue a retry of `wanted` waits in: its delay rounded up to a
// power of two of milliseconds (at least 1 ms; a retry waits at least its
// backoff, at most twice it), and its name NAME.delay.MS.
std::chrono::milliseconds delay_bucket(std::chrono::milliseconds wanted);
std::string delay_queue_name(const std::string& queue, std::chrono::milliseconds bucket);
// Its x-arguments: a quorum queue whose messages expire after `bucket` into
// NAME, at least once where the broker can.
std::vector<AmqpField> delay_queue_arguments(const std::string& queue, std::chrono::milliseconds bucket,
                                             bool at_least_once);
// Declares it (idempotent); its name, or the mismatch explained.
Expected<std::string> declare_delay_queue(AmqpConnection& connection, const std::string& queue,
                                          std::chrono::milliseconds bucket);
// Every bucket a retry of at most `longest` can wait in, shortest first:
// 1 ms to delay_bucket(longest) (a full-jitter backoff can draw any wait
// from 0 up; 17 for the default 60 s).
std::vector<std::chrono::milliseconds> delay_buckets(std::chrono::milliseconds longest);

// Declares the three (idempotent: declared again with the same arguments,
// nothing changes). A mismatch is a setup error worded by explain_mismatch.
Expected<AmqpTopology> declare_topology(AmqpConnection& connection, const AmqpTopologySettings& settings);

// A PRECONDITION_FAILED of queue.declare ("inequivalent arg 'x-queue-type'
// for queue 'jobs' in vhost '/': received 'quorum' but current is 'classic'")
// as one line for the operator: the argument, what it is there and what
// pillbox needs, why, every argument pillbox declares the queue with
// (`declared`: the broker names only the first difference it finds), and
// what to do. Other refusals keep the broker's words.
std::string explain_mismatch(const std::string& queue, const std::string& where, const AmqpRefusal& refusal,
                             const std::vector<AmqpField>& declared);

}  // namespace pillbox::broker
