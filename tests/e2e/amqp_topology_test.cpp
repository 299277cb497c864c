// The RabbitMQ fleet's topology (supervisor/broker/amqp_topology.h) and
// connection (supervisor/broker/amqp_connection.h) against a real
// rabbitmq-server the test starts itself (rabbit_server.h; one node for all
// the cases, a function each, each with queues of its own): what pillbox
// declares is what the broker then enforces, read back from the broker
// (rabbitmqctl), a queue of another kind is explained and left as it is,
// the broker itself dead-letters a message past the delivery limit, and a
// wrong password, a missing vhost or a broker that is down are one line each.
#include <doctest/doctest.h>

#include <map>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "supervisor/broker/amqp_connection.h"
#include "supervisor/broker/amqp_dead_letter.h"
#include "supervisor/broker/amqp_topology.h"
#include "tests/e2e/rabbit_server.h"
#include "tests/e2e/support.h"

using json = nlohmann::json;
using pillbox::broker::AmqpConnection;
using pillbox::broker::AmqpTopologySettings;

namespace {

AmqpConnection connect(const e2e::RabbitServer& server, const std::string& url = "") {
  auto address = pillbox::broker::parse_amqp_url(url.empty() ? server.url() : url);
  REQUIRE(address.has_value());
  auto c = AmqpConnection::open(*address);
  REQUIRE_MESSAGE(c.has_value(), c.error());
  return std::move(*c);
}

// The broker's own list of queues: name -> {type, arguments, messages}.
json queues(const e2e::RabbitServer& server) {
  const auto r = server.ctl({"list_queues", "name", "type", "arguments", "messages", "--formatter", "json", "--quiet"});
  REQUIRE_MESSAGE(r.exit_code == 0, r.err);
  const json list = json::parse(r.out, nullptr, false);
  REQUIRE(list.is_array());
  json by_name = json::object();
  for (const json& q : list) by_name[q.at("name").get<std::string>()] = q;
  return by_name;
}

// A queue's x-argument as rabbitmqctl prints it (a JSON object, or a list
// of [name, type, value], depending on the version).
json argument(const json& queue, const std::string& name) {
  const json& a = queue.at("arguments");
  if (a.is_object()) return a.value(name, json());
  for (const json& entry : a) {  // [name, value] or [name, type, value]
    if (entry.is_array() && entry.size() >= 2 && entry[0] == name) return entry.back();
  }
  return json();
}

AmqpTopologySettings settings(const std::string& queue, std::int64_t limit = 10) {
  AmqpTopologySettings s;
  s.queue = queue;
  s.delivery_limit = limit;
  return s;
}

void declared_then_enforced(e2e::RabbitServer& server) {
  auto c = connect(server);
  CHECK(c.server_version().rfind("3.", 0) == 0);
  auto t = pillbox::broker::declare_topology(c, settings("jobs"));
  REQUIRE_MESSAGE(t.has_value(), t.error());
  CHECK(t->at_least_once == pillbox::broker::supports_at_least_once(c.server_version()));

  json q = queues(server);
  REQUIRE(q.contains("jobs"));
  REQUIRE(q.contains("jobs.dlq"));
  CHECK(q["jobs"]["type"] == "quorum");
  CHECK(argument(q["jobs"], "x-delivery-limit") == 10);
  CHECK(argument(q["jobs"], "x-dead-letter-exchange") == "jobs.dlx");
  if (t->at_least_once) {
    CHECK(argument(q["jobs"], "x-dead-letter-strategy") == "at-least-once");
    CHECK(argument(q["jobs"], "x-overflow") == "reject-publish");
  }
  CHECK(q["jobs.dlq"]["type"] == "stream");
  const auto bindings = server.ctl({"list_bindings", "source_name", "destination_name", "--formatter", "json", "--quiet"});
  REQUIRE(bindings.exit_code == 0);
  const json b = json::parse(bindings.out, nullptr, false);
  REQUIRE(b.is_array());
  bool bound = false;
  for (const json& x : b) bound = bound || (x.value("source_name", "") == "jobs.dlx" && x.value("destination_name", "") == "jobs.dlq");
  CHECK(bound);

  // Again, from another connection: the same, with a message waiting
  // (confirmed first: a quorum queue counts it once a majority wrote it,
  // and an unconfirmed publish raced the count, CI of 8ee9c62).
  REQUIRE(c.confirm_publishes().is_ok());
  REQUIRE(c.publish("jobs", "waiting").is_ok());
  REQUIRE(c.wait_confirmed().is_ok());
  auto again_c = connect(server);
  auto again = pillbox::broker::declare_topology(again_c, settings("jobs"));
  REQUIRE_MESSAGE(again.has_value(), again.error());
  auto state = again_c.check_queue("jobs");
  REQUIRE(state.has_value());
  CHECK(state->messages == 1);
}

void other_kind_or_limit_explained(e2e::RabbitServer& server) {
  auto c = connect(server);
  // Another client's classic queue, holding a message.
  REQUIRE(c.declare_queue("legacy", {}).has_value());
  REQUIRE(c.publish("legacy", "someone's task").is_ok());
  auto refused = pillbox::broker::declare_topology(c, settings("legacy"));
  REQUIRE_FALSE(refused.has_value());
  INFO(refused.error());
  // The broker names one difference (which one is its choice); the line
  // says it and everything pillbox declares.
  CHECK(refused.error().rfind("queue 'legacy' exists on RabbitMQ at " + c.address().describe() + " with x-", 0) == 0);
  CHECK(refused.error().find("pillbox declares it durable with x-queue-type quorum, x-delivery-limit 10") !=
        std::string::npos);
  CHECK(refused.error().find('\n') == std::string::npos);
  CHECK(refused.error().find(e2e::RabbitServer::password()) == std::string::npos);
  // The connection goes on (the broker closed only the channel), and the
  // queue is untouched.
  auto legacy = c.check_queue("legacy");
  REQUIRE_MESSAGE(legacy.has_value(), legacy.error());
  CHECK(legacy->messages == 1);
  CHECK(queues(server)["legacy"]["type"] == "classic");

  // pillbox's own queue, declared with another delivery limit.
  REQUIRE(pillbox::broker::declare_topology(c, settings("limited", 10)).has_value());
  auto limit = pillbox::broker::declare_topology(c, settings("limited", 5));
  REQUIRE_FALSE(limit.has_value());
  INFO(limit.error());
  CHECK(limit.error().find("with x-delivery-limit '10', but pillbox needs '5'") != std::string::npos);
  CHECK(argument(queues(server)["limited"], "x-delivery-limit") == 10);
}

void broker_dead_letters_past_the_limit(e2e::RabbitServer& server) {
  auto c = connect(server);
  REQUIRE(pillbox::broker::declare_topology(c, settings("poisoned", 2)).has_value());
  REQUIRE(c.publish("poisoned", "kills every worker", "m-1").is_ok());
  // Each worker that takes it dies before it can say anything: the message
  // goes back (as a lost connection puts it back), and the broker counts.
  REQUIRE(c.consume("poisoned", 1).is_ok());
  std::vector<std::int64_t> counts;
  for (int delivery = 0; delivery < 3; ++delivery) {
    auto m = c.next(std::chrono::seconds(30));
    REQUIRE_MESSAGE(m.has_value(), m.error());
    REQUIRE(m->has_value());
    CHECK((*m)->message_id == "m-1");
    counts.push_back((*m)->delivery_count);
    REQUIRE(c.reject((*m)->delivery_tag, true).is_ok());
  }
  CHECK(counts == std::vector<std::int64_t>{0, 1, 2});
  // Past the limit (2), the broker dead-letters it into the stream, where a
  // reader from the first offset finds it, with the broker's reason.
  auto reader = connect(server);
  REQUIRE(reader.consume("poisoned.dlq", 10, {{"x-stream-offset", std::string("first")}}).is_ok());
  auto dead = reader.next(std::chrono::seconds(30));
  REQUIRE_MESSAGE(dead.has_value(), dead.error());
  REQUIRE(dead->has_value());
  CHECK((*dead)->message_id == "m-1");
  CHECK((*dead)->body == "kills every worker");
  CHECK((*dead)->first_death_reason == "delivery_limit");
  const json q = queues(server);
  CHECK(q["poisoned"]["messages"] == 0);
}

void refusals_are_one_line(e2e::RabbitServer& server) {
  auto open = [](const std::string& url) {
    auto address = pillbox::broker::parse_amqp_url(url);
    REQUIRE(address.has_value());
    return AmqpConnection::open(*address, std::chrono::seconds(5));
  };
  auto wrong = open(server.url_for("pillbox", "not-the-password", "%2f"));
  REQUIRE_FALSE(wrong.has_value());
  CHECK(wrong.error().find("refused the login of user 'pillbox'") != std::string::npos);
  CHECK(wrong.error().find("not-the-password") == std::string::npos);

  auto vhost = open(server.url_for("pillbox", e2e::RabbitServer::password(), "nowhere"));
  REQUIRE_FALSE(vhost.has_value());
  CHECK(vhost.error().find("refused vhost 'nowhere'") != std::string::npos);
  CHECK(vhost.error().find(e2e::RabbitServer::password()) == std::string::npos);

  const int port = e2e::free_loopback_port();
  auto down = open("amqp://pillbox:secret@127.0.0.1:" + std::to_string(port) + "/%2f");
  REQUIRE_FALSE(down.has_value());
  CHECK(down.error().rfind("cannot reach RabbitMQ at amqp://pillbox@127.0.0.1:" + std::to_string(port) + "/%2f", 0) == 0);
  CHECK(down.error().find("secret") == std::string::npos);
  for (const std::string& e : {wrong.error(), vhost.error(), down.error()}) CHECK(e.find('\n') == std::string::npos);
}

void deleted_queue_and_bad_names(e2e::RabbitServer& server) {
  auto c = connect(server);
  auto other = connect(server);
  REQUIRE(c.declare_queue("doomed", {}).has_value());
  REQUIRE(c.consume("doomed", 1).is_ok());
  REQUIRE(other.delete_queue("doomed").is_ok());
  auto m = c.next(std::chrono::seconds(30));  // the cancel comes at once; 30 s only bounds a broken test
  REQUIRE_FALSE(m.has_value());
  CHECK(m.error().find("cancelled the consume") != std::string::npos);

  // Names AMQP cannot carry (or that rabbitmq-c's C strings would cut) are
  // usage errors, and the connection goes on.
  for (const std::string& bad : {std::string(256, 'a'), std::string("a\0b", 3), std::string()}) {
    auto declared = other.declare_queue(bad, {});
    REQUIRE_FALSE(declared.has_value());
    CHECK(declared.error_code() == pillbox::ErrorCode::kUsage);
    CHECK_FALSE(other.broken());
  }
  CHECK(other.publish("q", "x", std::string(300, 'm')).code() == pillbox::ErrorCode::kUsage);
  CHECK(other.declare_queue("fine", {}).has_value());
}

// pillbox doctor --amqp --json: its checks by name.
std::map<std::string, json> doctor_checks(const e2e::RunResult& r) {
  std::map<std::string, json> by_name;
  REQUIRE_MESSAGE(r.records.size() == 1, r.describe());
  for (const json& c : r.records[0].at("checks")) by_name[c.at("name").get<std::string>()] = c;
  return by_name;
}

// The route proven, not assumed: a canary reaches NAME.dlq through NAME.dlx
// (and stays there, marked, its own queue gone); a route without its
// binding, a queue that is not there, a mismatched delivery limit and a
// wrong password are NO lines, exit 3, and doctor creates nothing.
void doctor_proves_the_route(e2e::RabbitServer& server) {
  const auto submitted = e2e::run_pillbox({"submit", "--amqp", server.url(), "--queue", "checked", "-"},
                                          e2e::task_line("t", "x"));
  REQUIRE_MESSAGE(submitted.exit_code == 0, submitted.describe());
  const auto ok = e2e::run_pillbox({"doctor", "--amqp", server.url(), "--queue", "checked", "--json"});
  INFO(ok.describe());
  CHECK(ok.exit_code == 0);
  auto checks = doctor_checks(ok);
  CHECK(checks["RabbitMQ connection"].value("ok", false));
  const json route = checks["RabbitMQ dead-letter route checked.dlx -> checked.dlq"];
  CHECK(route.value("ok", false));
  CHECK(route.value("detail", "").find("reached checked.dlq in") != std::string::npos);
  const json work = checks["RabbitMQ work queue checked"];
  CHECK(work.value("ok", false));
  CHECK(work.value("detail", "").find("x-delivery-limit 10") != std::string::npos);
  CHECK(work.value("detail", "").find("1 ready") != std::string::npos);
  // The canary is in the stream, and reads as one; its queue is gone.
  auto reader = connect(server);
  REQUIRE(reader.consume("checked.dlq", 10, {{"x-stream-offset", std::string("first")}}).is_ok());
  auto got = reader.next(std::chrono::seconds(30));  // it is there already; 30 s only bounds a broken test
  REQUIRE_MESSAGE(got.has_value(), got.error());
  REQUIRE(got->has_value());
  CHECK(pillbox::broker::is_canary(**got, "checked"));
  CHECK_FALSE(pillbox::broker::is_canary(**got, "other"));
  const json q = queues(server);
  for (const auto& [name, v] : q.items()) CHECK(name.find(".doctor.") == std::string::npos);

  // The same fleet, but NAME.dlq not bound to NAME.dlx: the canary is lost.
  auto c = connect(server);
  REQUIRE(c.declare_exchange("unbound.dlx", "fanout").is_ok());
  REQUIRE(c.declare_queue("unbound.dlq", {{"x-queue-type", std::string("stream")}}).has_value());
  REQUIRE(c.declare_queue("unbound", pillbox::broker::work_queue_arguments({.queue = "unbound", .delivery_limit = 10},
                                                                           true))
              .has_value());
  const auto lost = e2e::run_pillbox(
      {"doctor", "--amqp", server.url(), "--queue", "unbound", "--canary-wait", "2s", "--json"});
  INFO(lost.describe());
  CHECK(lost.exit_code == 3);
  checks = doctor_checks(lost);
  const json unrouted = checks["RabbitMQ dead-letter route unbound.dlx -> unbound.dlq"];
  CHECK_FALSE(unrouted.value("ok", true));
  CHECK(unrouted.value("detail", "").find("did not reach unbound.dlq within 2000 ms") != std::string::npos);
  CHECK(unrouted.value("fallback", "").find("bound to the fanout exchange unbound.dlx") != std::string::npos);
  CHECK(checks["RabbitMQ work queue unbound"].value("ok", false));

  // A queue that is not there: said, not created.
  const auto missing = e2e::run_pillbox({"doctor", "--amqp", server.url(), "--queue", "nothere", "--json"});
  CHECK(missing.exit_code == 3);
  checks = doctor_checks(missing);
  CHECK_FALSE(checks["RabbitMQ dead-letter route nothere.dlx -> nothere.dlq"].value("ok", true));
  CHECK(checks["RabbitMQ work queue nothere"].value("detail", "") == "nothere does not exist yet");
  CHECK_FALSE(queues(server).contains("nothere"));

  // Workers with --max-attempts 20 would declare another delivery limit.
  const auto other = e2e::run_pillbox(
      {"doctor", "--amqp", server.url(), "--queue", "checked", "--max-attempts", "20", "--json"});
  CHECK(other.exit_code == 3);
  checks = doctor_checks(other);
  CHECK(checks["RabbitMQ work queue checked"].value("detail", "").find("x-delivery-limit") != std::string::npos);

  const auto refused = e2e::run_pillbox(
      {"doctor", "--amqp", server.url_for("pillbox", "wrong", "%2f"), "--queue", "checked"});
  CHECK(refused.exit_code == 3);
  CHECK(refused.out.find("refused the login of user 'pillbox'") != std::string::npos);
  CHECK(refused.out.find("wrong") == std::string::npos);
}

}  // namespace

TEST_CASE("rabbitmq topology and connection on one real broker: enforced, mismatches explained, dead-lettered, refusals") {
  e2e::RabbitServer server;
  REQUIRE_RABBITMQ(server);
  {
    INFO("rabbitmq topology: declared as the broker then enforces it; declared again, nothing changes");
    declared_then_enforced(server);
  }
  {
    INFO("rabbitmq topology: a queue of another kind or limit is explained in one sentence and left as it is");
    other_kind_or_limit_explained(server);
  }
  {
    INFO("rabbitmq topology: the broker itself dead-letters a message past the delivery limit, reason delivery_limit");
    broker_dead_letters_past_the_limit(server);
  }
  {
    INFO("rabbitmq connection: a wrong password, a missing vhost, a broker that is down: one line each, no password");
    refusals_are_one_line(server);
  }
  {
    INFO("rabbitmq connection: a consume whose queue is deleted says so; a bad name is refused before it is sent");
    deleted_queue_and_bad_names(server);
  }
  {
    INFO("pillbox doctor --amqp: a canary proves the dead-letter route; what is broken or missing is a NO line");
    doctor_proves_the_route(server);
  }
}
