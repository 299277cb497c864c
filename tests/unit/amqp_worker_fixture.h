#pragma once
// What the unit tests of a RabbitMQ worker's messages share: the settings
// of a worker of queue "jobs" (consumer host:1, 3 attempts, handler echo)
// and the crash it judged.
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

}  // namespace amqp_fixture
