#pragma once
// What the unit tests of pillbox's Kafka records share: a worker of topic
// "jobs" (consumer host:1, group pillbox, handler echo), a record of it
// whose key and value are bytes (NUL, 0xff) and whose headers repeat, hold
// a null and claim pillbox's names, the crash it dead-lettered that record
// for (its record as the worker writes it), and a produced record as a
// consumer reads it back.
#include <cstdint>
#include <string>

#include "amqp_worker_fixture.h"
#include "supervisor/broker/kafka_dead_letter.h"
#include "supervisor/broker/kafka_message.h"
#include "supervisor/broker/stream_entry.h"
#include "supervisor/broker/worker_settings.h"
#include "supervisor/classify/outcome.h"

namespace kafka_fixture {

inline constexpr std::int64_t kNowMs = 1796159727174;

// The RabbitMQ fleet's worker (amqp_worker_fixture.h) with a group and a policy.
inline pillbox::broker::WorkerSettings worker_settings() {
  pillbox::broker::WorkerSettings s = amqp_fixture::worker_settings();
  s.consumer.group = "pillbox";
  s.identity.handler = "exec";
  s.identity.policy_identity = "exec@56fef913ecdf";
  s.identity.policy = "[policy]\nname = exec\n";
  return s;
}

// Its crash, with a stderr tail that is bytes.
inline pillbox::Outcome segv() {
  pillbox::Outcome o = amqp_fixture::segv();
  o.stderr_tail = std::string("boom\x00\xfe", 6);
  return o;
}

// The fleet's key (32 bytes).
inline const pillbox::broker::FleetKey& fleet_key() {
  static const pillbox::broker::FleetKey key(std::string(32, 'k'));
  return key;
}

inline pillbox::broker::KafkaMessage original() {
  pillbox::broker::KafkaMessage m;
  m.topic = "jobs";
  m.partition = 3;
  m.offset = 41;
  m.key = std::string("k\x00y\xff", 4);
  m.value = std::string("payload \x00\xff end", 14);
  m.headers = {{"tenant", std::string("acme")},
               {"trace", std::nullopt},
               {"tag", std::string("a")},
               {"pillbox-record", std::string(R"({"kind":"ok"})")},
               {"tag", std::string("b")},
               {"pillbox.dedupe", std::string("jobs/0@0")},
               {"pillbox-sig", std::string(64, 'f')},
               {"bin", std::string("\x00\xff", 2)}};
  m.timestamp_ms = kNowMs - 1000;
  return m;
}

// The entry the worker held for `m`: its key (the record's, or the one it
// derives for a null key), payload, id "p@o" and delivery number.
inline pillbox::broker::HeldEntry held(const pillbox::broker::KafkaMessage& m, std::int64_t delivery = 3) {
  pillbox::broker::HeldEntry e;
  e.task.key = m.key.value_or("message:0123456789abcdef");
  e.task.payload = m.value.value_or("");
  e.id = std::to_string(m.partition) + "@" + std::to_string(m.offset);
  e.delivery = delivery;
  return e;
}

// The worker's record of `m`'s dead letter, as the Kafka worker writes it.
inline std::string record_of(const pillbox::broker::KafkaMessage& m, std::int64_t delivery = 3,
                             const pillbox::Outcome& outcome = segv()) {
  return pillbox::broker::dead_letter_record(worker_settings(), held(m, delivery), outcome, "crashed 3 times alike",
                                             kNowMs, "topic", pillbox::broker::kafka_record_source(m, "pillbox"));
}

// What a consumer of `out.topic` reads back: it as produced, at `offset`.
inline pillbox::broker::KafkaMessage as_read(const pillbox::broker::KafkaOutgoing& out, std::int64_t offset) {
  pillbox::broker::KafkaMessage m;
  m.topic = out.topic;
  m.partition = out.partition;
  m.offset = offset;
  m.key = out.key;
  m.value = out.value;
  m.headers = out.headers;
  m.timestamp_ms = kNowMs;
  return m;
}

// The first header `name`'s value ("<absent>" when none, "<null>" when null).
inline std::string header(const pillbox::broker::KafkaHeaders& headers, const std::string& name) {
  for (const auto& [n, v] : headers) {
    if (n == name) return v ? *v : "<null>";
  }
  return "<absent>";
}

}  // namespace kafka_fixture
