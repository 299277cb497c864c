#pragma once
// What the RabbitMQ end-to-end tests do as a client of the broker they
// started (rabbit_server.h), written once: a connection to it, and the
// arguments of a quarantine verb on its queue NAME.
#include <doctest/doctest.h>

#include <string>
#include <vector>

#include "supervisor/broker/amqp_connection.h"
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

}  // namespace e2e
