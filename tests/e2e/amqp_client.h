#pragma once
// What the RabbitMQ end-to-end tests do as a client of the broker they
// started (rabbit_server.h), written once: a connection to it, the
// arguments of a quarantine verb on its queue NAME, reading queues, and a
// fleet key for its workers and verbs.
#include <doctest/doctest.h>
#include <sys/stat.h>

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "supervisor/broker/amqp_connection.h"
#include "supervisor/broker/amqp_dead_letter.h"
#include "supervisor/broker/amqp_stream_reader.h"
#include "tests/e2e/rabbit_server.h"

namespace e2e {

// A connection to `server` as its URL's user; fails the test when there is none.
inline pillbox::broker::AmqpConnection amqp_connect(const RabbitServer& server) {
  auto address = pillbox::broker::parse_amqp_url(server.url());
  REQUIRE(address.has_value());
  auto c = pillbox::broker::AmqpConnection::open(*address);
  REQUIRE_MESSAGE(c.has_value(), c.error());
  return std::move(*c);
}

// pillbox quarantine VERB... --amqp URL --queue NAME
inline std::vector<std::string> quarantine_args(const RabbitServer& server, const std::string& queue,
                                                const std::vector<std::string>& verb) {
  std::vector<std::string> args = {"quarantine"};
  args.insert(args.end(), verb.begin(), verb.end());
  args.insert(args.end(), {"--amqp", server.url(), "--queue", queue});
  return args;
}

// Every message ready in `queue`, taken (acknowledged) in order.
inline std::vector<pillbox::broker::AmqpMessage> drain(pillbox::broker::AmqpConnection& c, const std::string& queue) {
  std::vector<pillbox::broker::AmqpMessage> out;
  for (;;) {
    auto m = c.get(queue);
    REQUIRE_MESSAGE(m.has_value(), m.error());
    if (!*m) return out;
    REQUIRE(c.ack((*m)->delivery_tag).is_ok());
    out.push_back(std::move(**m));
  }
}

// Every message of the stream `dlq` (NAME.dlq) as it is now, read by offset
// (AmqpStreamReader: never consumed); none when there is no such stream yet.
inline std::vector<pillbox::broker::AmqpDeadLetter> all_dead_letters(const RabbitServer& server, const std::string& dlq) {
  auto c = amqp_connect(server);
  if (!c.check_queue(dlq)) return {};
  pillbox::broker::AmqpStreamReader reader(c, dlq, 1 << 20);
  const auto end = reader.end();
  REQUIRE_MESSAGE(end.has_value(), end.error());
  std::vector<pillbox::broker::AmqpDeadLetter> out;
  const auto read = reader.read(0, *end, [&](pillbox::broker::AmqpMessage&& m) {
    out.push_back(pillbox::broker::read_dead_letter(m));
    return true;
  });
  REQUIRE_MESSAGE(read.is_ok(), read.message());
  return out;
}

// The messages ready in `queue`, as queue.declare says (a quorum queue
// counts a peek as a delivery: this never takes one).
inline std::uint32_t ready(pillbox::broker::AmqpConnection& c, const std::string& queue) {
  auto s = c.check_queue(queue);
  REQUIRE_MESSAGE(s.has_value(), s.error());
  return s->messages;
}

// The header `name` of `m` when it is text, else "".
inline std::string header_text(const pillbox::broker::AmqpMessage& m, std::string_view name) {
  const pillbox::broker::AmqpValue* v = pillbox::broker::find_field(m.headers, name);
  return v != nullptr && v->text() != nullptr ? *v->text() : std::string();
}

// A fleet key (supervisor/broker/fleet_key.h) for a test's workers and
// verbs: 64 bytes in `dir`/fleet.key, mode 0600 as a key must be.
inline std::string fleet_key_file(const TempDir& dir) {
  const std::string key = dir.write("fleet.key", std::string(64, 'k'));
  REQUIRE(::chmod(key.c_str(), 0600) == 0);
  return key;
}

}  // namespace e2e
