// What a message carries through RabbitMQ, on a real rabbitmq-server the
// test starts itself (rabbit_server.h; one node for all the cases, a
// function each): headers of every AMQP type and the properties pillbox
// uses come back as sent (a dead letter can carry them on type for type);
// a message rejected from the work queue is in NAME.dlq with RabbitMQ's own
// x-death (reason rejected) and its headers; a retry parked in a delay
// queue (amqp_topology.h, NAME.delay.MS) waits there with no consumer and
// comes back to NAME when its time is up, with x-death (reason expired),
// its headers, and a delivery count that starts again.
#include <doctest/doctest.h>

#include <algorithm>
#include <chrono>
#include <limits>
#include <map>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "supervisor/broker/amqp_connection.h"
#include "supervisor/broker/amqp_dead_letter.h"
#include "supervisor/broker/amqp_death.h"
#include "supervisor/broker/amqp_topology.h"
#include "tests/e2e/amqp_client.h"
#include "tests/e2e/rabbit_server.h"
#include "tests/e2e/support.h"

using namespace pillbox::broker;
using Clock = std::chrono::steady_clock;

namespace {

// A header of each type RabbitMQ keeps as sent. (It has no 8-bit unsigned,
// 16-bit unsigned, 64-bit unsigned or 32-bit float of its own: those it
// turns into others, so they are not here.)
AmqpTable headers_of_every_kind() {
  return {
      {"key", std::string("report-7.pdf")},
      {"bool", true},
      {"i8", AmqpValue::of_kind('b', std::int64_t{-5})},
      {"i16", AmqpValue::of_kind('s', std::int64_t{-300})},
      {"i32", AmqpValue::of_kind('I', std::int64_t{-70000})},
      {"i64", std::int64_t{-(std::int64_t{1} << 40)}},
      {"u32", AmqpValue::of_kind('i', std::uint64_t{4000000000u})},
      {"time", AmqpValue::timestamp(1796158239)},
      {"double", AmqpValue::of_kind('d', -2.25)},
      {"decimal", AmqpValue::of_kind('D', AmqpDecimal{2, 12345})},
      {"bytes", AmqpValue::of_kind('x', std::string("\x00\xff", 2))},
      {"text", std::string("t\xc3\xa9xt")},
      {"array", AmqpValue::array({std::string("a"), std::int64_t{1}})},
      {"table", AmqpValue::table({{"nested", std::string("yes")}})},
      {"void", AmqpValue{}},
  };
}

AmqpOutgoing message(const std::string& body, const AmqpTable& headers) {
  AmqpOutgoing m;
  m.body = body;
  m.message_id = "m-1";
  m.correlation_id = "req-42";
  m.reply_to = "replies";
  m.headers = headers;
  return m;
}

void publish_confirmed(AmqpConnection& c, const std::string& queue, const AmqpOutgoing& m) {
  REQUIRE(c.confirm_publishes().is_ok());
  REQUIRE(c.publish(queue, m).is_ok());
  const auto confirmed = c.wait_confirmed();
  REQUIRE_MESSAGE(confirmed.is_ok(), confirmed.message());
}

// A message's headers by name, those the broker adds left out. (A quorum
// queue keeps each header's type, not their order: it sorts them by name.)
AmqpTable by_name(const AmqpTable& headers) {
  AmqpTable out;
  for (const AmqpField& f : headers) {
    if (f.name.rfind("x-", 0) != 0) out.push_back(f);
  }
  std::stable_sort(out.begin(), out.end(), [](const AmqpField& a, const AmqpField& b) { return a.name < b.name; });
  return out;
}

// As headers_of_every_kind, without the one type RabbitMQ 3.10's stream
// queues cannot take at the top level: a message with a decimal header,
// dead-lettered into NAME.dlq, never arrived there, and the broker then
// answered INTERNAL_ERROR to every queue.declare (seen with 3.10.8,
// December 2026; a decimal inside a table went through). The same broker
// drops array and table headers from what a stream queue keeps (x-death
// among them), and keeps the rest type for type.
AmqpTable headers_a_stream_takes() {
  AmqpTable out;
  for (const AmqpField& f : headers_of_every_kind()) {
    if (f.value.kind != 'D') out.push_back(f);
  }
  return out;
}

// Headers of every type, and the properties, come back as sent.
void headers_come_back_as_sent(e2e::RabbitServer& server) {
  auto c = e2e::amqp_connect(server);
  REQUIRE(declare_topology(c, AmqpTopologySettings{.queue = "as-sent"}).has_value());
  publish_confirmed(c, "as-sent", message("payload", headers_of_every_kind()));
  auto got = c.get("as-sent");
  REQUIRE_MESSAGE(got.has_value(), got.error());
  REQUIRE(got->has_value());
  const AmqpMessage& m = **got;
  CHECK(m.body == "payload");
  CHECK(m.message_id == "m-1");
  CHECK(m.correlation_id == "req-42");
  CHECK(m.reply_to == "replies");
  CHECK(m.key == "report-7.pdf");
  CHECK(m.delivery_count == 0);
  CHECK_FALSE(m.headers_cut);
  CHECK(by_name(m.headers) == by_name(headers_of_every_kind()));
  CHECK(c.ack(m.delivery_tag).is_ok());
}

// Rejected from the work queue: in NAME.dlq with x-death and its headers.
void rejected_goes_to_dlq_with_x_death(e2e::RabbitServer& server) {
  auto c = e2e::amqp_connect(server);
  REQUIRE(declare_topology(c, AmqpTopologySettings{.queue = "rejects"}).has_value());
  publish_confirmed(c, "rejects", message("bad", headers_a_stream_takes()));
  auto got = c.get("rejects");
  REQUIRE_MESSAGE(got.has_value(), got.error());
  REQUIRE(got->has_value());
  REQUIRE(c.reject((*got)->delivery_tag, false).is_ok());

  auto reader = e2e::amqp_connect(server);
  REQUIRE(reader.consume("rejects.dlq", 10, {{"x-stream-offset", std::string("first")}}).is_ok());
  auto dead = reader.next(std::chrono::seconds(30));  // 30 s only bounds a broken test
  REQUIRE_MESSAGE(dead.has_value(), dead.error());
  REQUIRE(dead->has_value());
  const AmqpMessage& d = **dead;
  CHECK(d.body == "bad");
  CHECK(d.message_id == "m-1");
  CHECK(d.correlation_id == "req-42");
  CHECK(d.first_death_reason == "rejected");
  // Every scalar header as sent; the broker's first death in its x-first-death-*.
  std::size_t dropped = 0;
  for (const AmqpField& f : headers_a_stream_takes()) {
    const AmqpValue* there = find_field(d.headers, f.name);
    if (f.value.kind == 'A' || f.value.kind == 'F') {
      dropped += there == nullptr;
      continue;
    }
    REQUIRE_MESSAGE(there != nullptr, f.name);
    CHECK_MESSAGE(*there == f.value, f.name);
  }
  CHECK(*find_field(d.headers, "x-first-death-queue")->text() == "rejects");
  // x-death is an array: where the stream keeps arrays, it says the same.
  const AmqpDeaths deaths = deaths_of(d.headers);
  if (find_field(d.headers, "x-death") == nullptr) {
    MESSAGE("this broker (" << c.server_version() << ") drops array and table headers in a stream queue, x-death "
            "with them (" << dropped << " of 2 here): pillbox's own dead letters carry theirs as JSON text");
  } else {
    REQUIRE(deaths.deaths.size() == 1);
    CHECK(deaths.deaths[0].reason == "rejected");
    CHECK(deaths.deaths[0].queue == "rejects");
    CHECK(deaths.deaths[0].count == 1);
  }
}

// A retry waits in a delay queue, held by no consumer, and comes back.
void delay_queue_holds_then_returns(e2e::RabbitServer& server) {
  auto c = e2e::amqp_connect(server);
  REQUIRE(declare_topology(c, AmqpTopologySettings{.queue = "later"}).has_value());
  const auto bucket = delay_bucket(std::chrono::milliseconds(1500));
  CHECK(bucket == std::chrono::milliseconds(2048));
  auto delay = declare_delay_queue(c, "later", bucket);
  REQUIRE_MESSAGE(delay.has_value(), delay.error());
  CHECK(*delay == "later.delay.2048");
  // Declared again: the same arguments, nothing changes.
  CHECK(declare_delay_queue(c, "later", bucket).has_value());

  const auto sent = Clock::now();
  publish_confirmed(c, *delay, message("try again", headers_of_every_kind()));
  // Waiting: in the delay queue, which no one consumes; not in NAME.
  auto waiting = c.check_queue(*delay);
  REQUIRE(waiting.has_value());
  CHECK(waiting->messages == 1);
  CHECK(waiting->consumers == 0);
  CHECK(c.check_queue("later")->messages == 0);

  auto worker = e2e::amqp_connect(server);
  REQUIRE(worker.consume("later", 1).is_ok());
  auto back = worker.next(std::chrono::seconds(30));  // due after 2 s; 30 s only bounds a broken test
  const auto waited = Clock::now() - sent;
  REQUIRE_MESSAGE(back.has_value(), back.error());
  REQUIRE(back->has_value());
  const AmqpMessage& m = **back;
  CHECK(waited >= std::chrono::milliseconds(2048));
  CHECK(waited < std::chrono::seconds(20));
  CHECK(m.body == "try again");
  CHECK(m.key == "report-7.pdf");
  CHECK(m.message_id == "m-1");
  CHECK(m.delivery_count == 0);  // a new message in NAME: its count starts again
  CHECK(by_name(m.headers) == by_name(headers_of_every_kind()));
  const AmqpDeaths deaths = deaths_of(m.headers);
  REQUIRE(deaths.deaths.size() == 1);
  CHECK(deaths.deaths[0].reason == "expired");
  CHECK(deaths.deaths[0].queue == "later.delay.2048");
  CHECK(worker.ack(m.delivery_tag).is_ok());
  CHECK(c.check_queue(*delay)->messages == 0);
}

// A delay queue that exists with another TTL is explained, not changed.
void delay_queue_mismatch_explained(e2e::RabbitServer& server) {
  auto c = e2e::amqp_connect(server);
  // All as pillbox declares it but the TTL.
  const auto other_ttl = delay_queue_arguments("odd", std::chrono::milliseconds(65), supports_at_least_once(c.server_version()));
  REQUIRE(c.declare_queue("odd.delay.64", other_ttl).has_value());
  auto d = declare_delay_queue(c, "odd", std::chrono::milliseconds(64));
  REQUIRE_FALSE(d.has_value());
  CHECK_MESSAGE(d.error().find("queue 'odd.delay.64' exists on RabbitMQ at") == 0, d.error());
  CHECK_MESSAGE(d.error().find("with x-message-ttl '65', but pillbox needs '64'") != std::string::npos, d.error());
  CHECK_MESSAGE(d.error().find("x-dead-letter-exchange '',") != std::string::npos, d.error());
  CHECK_MESSAGE(d.error().find("a retry's wait") != std::string::npos, d.error());
}

// pillbox's own dead letter of a message with every type of header (a
// top-level decimal and x-death among them) goes through NAME.dlx into the
// stream NAME.dlq and reads back whole; the broker is still well after it.
void pillbox_dead_letter_through_the_stream(e2e::RabbitServer& server) {
  auto c = e2e::amqp_connect(server);
  REQUIRE(declare_topology(c, AmqpTopologySettings{.queue = "poison"}).has_value());
  AmqpMessage m;
  m.body = std::string("bad \x00 bytes", 11);
  m.message_id = "m-1";
  m.correlation_id = "req-42";
  m.headers = headers_of_every_kind();
  m.headers.push_back({"x-death", AmqpValue::array({AmqpValue::table({{"reason", std::string("expired")},
                                                                       {"queue", std::string("poison.delay.8")},
                                                                       {"count", std::int64_t{1}}})})});
  const nlohmann::json record = {{"kind", "crash"}, {"fingerprint", "pb1-0123"}, {"attempts", 2}};
  const AmqpOutgoing out = dead_letter_message(m, "report-7.pdf", "poison", record);
  REQUIRE(c.confirm_publishes().is_ok());
  REQUIRE(c.publish_to_exchange("poison.dlx", out).is_ok());  // the fanout: NAME.dlq and any queue an operator bound
  const auto confirmed = c.wait_confirmed();
  REQUIRE_MESSAGE(confirmed.is_ok(), confirmed.message());

  auto reader = e2e::amqp_connect(server);
  REQUIRE(reader.consume("poison.dlq", 10, {{"x-stream-offset", std::string("first")}}).is_ok());
  auto got = reader.next(std::chrono::seconds(30));  // 30 s only bounds a broken test
  REQUIRE_MESSAGE(got.has_value(), got.error());
  REQUIRE(got->has_value());
  const AmqpDeadLetter d = read_dead_letter(**got);
  CHECK(d.unreadable.empty());
  CHECK(d.record == record);
  CHECK(d.payload == m.body);
  CHECK(d.key == "report-7.pdf");
  CHECK(d.queue == "poison");
  CHECK(d.message_id == "m-1");
  CHECK(d.offset == 0);
  CHECK(d.original.at("correlation_id") == "req-42");
  CHECK(d.original.at("headers").at("array") == nlohmann::json::array({"a", 1}));
  CHECK(d.original.at("headers").at("decimal").at("decimal") == 12345);
  CHECK(d.x_death.at("deaths")[0].at("queue") == "poison.delay.8");
  CHECK(*find_field((*got)->headers, "decimal")->text() == "123.45");
  // The broker is still well: it declares queues.
  CHECK(declare_topology(c, AmqpTopologySettings{.queue = "after-poison"}).has_value());
}

// A message with a decimal header (legal AMQP, but a stream queue cannot
// keep one: dead-lettered as it is into NAME.dlq by the broker, it broke
// the stream) is given back at once by the worker as a copy whose header is
// text, and that copy runs: nothing in NAME keeps a decimal header for the
// broker to dead-letter.
void decimal_header_given_back_as_text(e2e::RabbitServer& server) {
  const auto submitted = e2e::run_pillbox({"submit", "--amqp", server.url(), "--queue", "priced", "-"},
                                     e2e::task_line("plain", "no decimals"));
  REQUIRE_MESSAGE(submitted.exit_code == 0, submitted.describe());  // declares the topology as workers want it
  auto c = e2e::amqp_connect(server);
  AmqpOutgoing priced;
  priced.body = "priced";
  priced.message_id = "dec-1";
  priced.headers = {{"key", std::string("dec-1")}, {"price", AmqpValue::of_kind('D', AmqpDecimal{2, 12345})}};
  publish_confirmed(c, "priced", priced);

  const auto r = e2e::run_pillbox({"worker", "--amqp", server.url(), "--queue", "priced", "--handler", "echo",
                              "--exit-when-idle", "1s", "--json"});
  INFO(r.describe());
  CHECK(r.exit_code == 0);
  std::map<std::string, std::vector<std::string>> verdicts;
  for (const nlohmann::json& v : r.records) {
    verdicts[v.value("key", "")].push_back(v.value("verdict", ""));
    if (v.value("key", "") != "dec-1") continue;
    if (v.value("verdict", "") == "released") {
      CHECK(v.value("verdict_reason", "").find("decimal header price as text") != std::string::npos);
    } else {
      CHECK(v.value("deliveries", 0) == 2);  // the copy counts on from the release
      CHECK(v.value("output", "") == "priced");
    }
  }
  CHECK(verdicts["plain"] == std::vector<std::string>{"ok"});
  CHECK(verdicts["dec-1"] == std::vector<std::string>{"released", "ok"});
  // NAME.dlq still serves (a stream the broker broke answers INTERNAL_ERROR).
  CHECK(c.check_queue("priced.dlq").has_value());
}

}  // namespace

TEST_CASE("amqp messages on a real broker: headers as sent, x-death on dead letters, delay queues") {
  e2e::RabbitServer server;
  REQUIRE_RABBITMQ(server);
  {
    INFO("headers of every type, and the properties, come back as sent");
    headers_come_back_as_sent(server);
  }
  {
    INFO("rejected from the work queue: in NAME.dlq with x-death and its headers");
    rejected_goes_to_dlq_with_x_death(server);
  }
  {
    INFO("a retry waits in a delay queue, held by no consumer, and comes back");
    delay_queue_holds_then_returns(server);
  }
  {
    INFO("pillbox's own dead letter, with every type of header, through the stream and back");
    pillbox_dead_letter_through_the_stream(server);
  }
  {
    INFO("a delay queue that exists with another TTL is explained, not changed");
    delay_queue_mismatch_explained(server);
  }
  {
    INFO("a decimal header: the worker gives the message back with it as text, then runs it");
    decimal_header_given_back_as_text(server);
  }
  {
    INFO("what a worker's start pays for declaring every delay queue: made, then declared again");
    auto c = e2e::amqp_connect(server);
    auto declare_all = [&] {
      const auto t0 = Clock::now();
      for (const auto bucket : delay_buckets(std::chrono::milliseconds(60000))) {
        const auto made = declare_delay_queue(c, "starts", bucket);
        REQUIRE_MESSAGE(made.has_value(), made.error());
      }
      return std::chrono::duration<double, std::milli>(Clock::now() - t0).count();
    };
    const double made_ms = declare_all();
    const double again_ms = declare_all();
    CHECK(c.check_queue("starts.delay.65536").has_value());
    MESSAGE("17 delay queues: made in " << made_ms << " ms, declared again in " << again_ms << " ms");
  }
}

TEST_CASE("amqp delay buckets: a power of two of milliseconds, at least the wait, at most twice it") {
  CHECK(delay_bucket(std::chrono::milliseconds(0)) == std::chrono::milliseconds(1));
  CHECK(delay_bucket(std::chrono::milliseconds(1)) == std::chrono::milliseconds(1));
  CHECK(delay_bucket(std::chrono::milliseconds(1000)) == std::chrono::milliseconds(1024));
  CHECK(delay_bucket(std::chrono::milliseconds(1024)) == std::chrono::milliseconds(1024));
  CHECK(delay_bucket(std::chrono::milliseconds(1025)) == std::chrono::milliseconds(2048));
  CHECK(delay_bucket(std::chrono::milliseconds(60000)) == std::chrono::milliseconds(65536));
  CHECK(delay_queue_name("jobs", std::chrono::milliseconds(512)) == "jobs.delay.512");
  // Every bucket a wait of up to the longest can fall in (full jitter: from 0).
  using ms = std::chrono::milliseconds;
  CHECK(delay_buckets(ms(10)) == std::vector<ms>{ms(1), ms(2), ms(4), ms(8), ms(16)});
  CHECK(delay_buckets(ms(0)) == std::vector<ms>{ms(1)});
  const auto defaults = delay_buckets(ms(60000));
  CHECK(defaults.size() == 17);
  CHECK(defaults.back() == ms(65536));
}
