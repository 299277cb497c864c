#pragma once
// What the unit tests of a RabbitMQ worker's messages share: the settings
// of a worker of queue "jobs" (consumer host:1, 3 attempts, handler echo),
// the crash it judged, and a publication as the broker delivers it back.
#include <cstdint>
#include <utility>

#include "supervisor/broker/amqp_entry.h"
#include "supervisor/broker/worker_settings.h"
#include "supervisor/classify/outcome.h"

namespace amqp_fixture {

inline pillbox::broker::WorkerSettings worker_settings() {
  pillbox::broker::WorkerSettings s;
  s.keys.stream = "jobs";
  s.consumer.name = "host:1";
  s.retry.max_attempts = 3;
  s.identity.handler_identity = "echo";
  return s;
}

inline pillbox::Outcome segv() {
  pillbox::Outcome o;
  o.kind = pillbox::Kind::kCrash;
  o.fingerprint = "pb1-crash";
  o.signal = 11;
  o.message = "SIGSEGV in parse";
  return o;
}

// `m.key` as the connection sets it: the first header `key`, when it is text.
inline void set_key_as_delivered(pillbox::broker::AmqpMessage& m) {
  m.key.reset();
  if (const auto* key = pillbox::broker::find_field(m.headers, "key"); key != nullptr && key->text() != nullptr) {
    m.key = *key->text();
  }
}

// What the broker hands a consumer for a published message (its headers as
// sent, the broker's count added when it redelivered it).
inline pillbox::broker::AmqpMessage delivered(const pillbox::broker::AmqpPublication& p, std::int64_t count = 0) {
  pillbox::broker::AmqpMessage m;
  m.delivery_tag = 9;
  m.body = p.body;
  m.message_id = p.message.message_id;
  m.correlation_id = p.message.correlation_id;
  m.reply_to = p.message.reply_to;
  m.headers = p.message.headers;
  set_key_as_delivered(m);
  m.delivery_count = count;
  return m;
}

// A message as a worker holds it (read_message).
inline pillbox::broker::AmqpHeld held(pillbox::broker::AmqpMessage m) {
  pillbox::broker::AmqpHeld e;
  pillbox::broker::read_message(std::move(m), e);
  return e;
}

}  // namespace amqp_fixture
