#pragma once
// A dead letter on RabbitMQ as pillbox writes it (to NAME.dlx, the
// exchange bound to the stream queue NAME.dlq) and reads it back, and a
// dead letter the broker wrote itself (past x-delivery-limit) read alike.
// Pure: no connection here.
//
// A stream queue keeps scalar headers type for type but drops arrays and
// tables, RabbitMQ's x-death among them, and a top-level decimal header
// breaks it (docs/distributed.md, RabbitMQ; tests/e2e/amqp_message_test).
// So pillbox's part is JSON text in string headers:
//   pillbox-record    the record, as the Redis fleet's `record` field
//   pillbox-original  the message as it came: message_id, correlation_id,
//                     reply_to and every header (amqp_value.h's JSON)
//   pillbox-x-death   RabbitMQ's own history of it (amqp_death.h's JSON)
//   pillbox-queue     the work queue it was dead-lettered from
//   key               the task's key (as pillbox submit writes it)
// and the original's own scalar headers are carried on as they were
// (decimals as text; not the broker's x-* nor pillbox-*, but for a
// replayed message's tag, pillbox-replay and pillbox-replay-of, always
// carried when it is one: amqp_replay_notice.h). The body is the
// payload, exact; the message_id the original's. A message's headers must
// fit in one AMQP frame (128 KiB): each JSON header is at most
// kMaxDeadLetterJson bytes (over it, the part is replaced by what says
// so), and the original's headers are carried on while they take at most
// kMaxCarriedHeaders.
#include <cstdint>
#include <string>
#include <string_view>

#include <nlohmann/json.hpp>

#include "supervisor/broker/amqp_connection.h"
#include "supervisor/broker/amqp_value.h"

namespace pillbox::broker {

inline constexpr std::size_t kMaxDeadLetterJson = 24u << 10;
inline constexpr std::size_t kMaxCarriedHeaders = 16u << 10;

// The dead letter of `original` (its body the payload), whose task had
// `key`, taken from the work queue `queue`, with pillbox's `record` (JSON).
AmqpOutgoing dead_letter_message(const AmqpMessage& original, const std::string& key, const std::string& queue,
                                 const nlohmann::json& record);

// A message of NAME.dlq read back. What it says is a claim (anyone allowed
// to publish to NAME.dlx can write one): each part is parsed bounded, and
// what does not parse is said in `unreadable`, never thrown.
struct AmqpDeadLetter {
  std::string key;              // the header `key`, else the message_id
  std::string payload;
  std::string message_id;
  std::string queue;            // pillbox-queue, else the broker's x-first-death-queue
  // pillbox's record; null for a dead letter the broker wrote itself.
  nlohmann::json record;
  nlohmann::json original;      // pillbox-original; null when none
  nlohmann::json x_death;       // pillbox-x-death; null when none
  // The broker's own first death (x-first-death-*): for a dead letter it
  // wrote itself (delivery_limit: the message killed every worker), all
  // there is of its history.
  std::string first_death_reason;
  std::string first_death_queue;
  std::int64_t offset = -1;     // its place in NAME.dlq (x-stream-offset), -1 unknown
  std::string unreadable;       // "" or which part could not be read, and why
  bool from_pillbox() const { return !record.is_null(); }
};
AmqpDeadLetter read_dead_letter(const AmqpMessage& message);

// `pillbox doctor --amqp` proves the dead-letter route with a canary: a
// message with header pillbox-canary (its run's id), expired by the broker
// out of a queue of its own, NAME.doctor.ID, into NAME.dlx, so that it
// arrives in NAME.dlq as a dead letter would. A stream cannot delete it:
// is_canary tells it from dead letters. A canary is one whose first death is that: a work
// message that carries the header is no canary (its first death is in NAME).
inline constexpr std::string_view kCanaryHeader = "pillbox-canary";
std::string canary_queue_name(const std::string& queue, const std::string& id);
bool is_canary(const AmqpMessage& message, const std::string& queue);

}  // namespace pillbox::broker
