// The RabbitMQ fleet's pure parts: the --amqp URL (supervisor/broker/amqp_connection.h)
// and the topology's words (supervisor/broker/amqp_topology.h). The broker's
// own answers are tested against a real rabbitmq-server in
// tests/e2e/amqp_topology_test.cpp.
#include <doctest/doctest.h>

#include <string>
#include <variant>

#include "supervisor/broker/amqp_connection.h"
#include "supervisor/broker/amqp_topology.h"

using pillbox::broker::AmqpRefusal;
using pillbox::broker::parse_amqp_url;

TEST_CASE("amqp url: user, password, host, port and vhost; defaults as RabbitMQ's clients have them") {
  auto a = parse_amqp_url("amqp://alice:s3cret@broker.example:5673/%2f");
  REQUIRE(a.has_value());
  CHECK(a->user == "alice");
  CHECK(a->password == "s3cret");
  CHECK(a->host == "broker.example");
  CHECK(a->port == 5673);
  CHECK(a->vhost == "/");
  CHECK(a->describe() == "amqp://alice@broker.example:5673/%2f");  // never the password

  auto d = parse_amqp_url("amqp://127.0.0.1");
  REQUIRE(d.has_value());
  CHECK(d->user == "guest");
  CHECK(d->password == "guest");
  CHECK(d->port == 5672);
  CHECK(d->vhost == "/");

  auto v = parse_amqp_url("amqp://u:p@h/prod%2Fjobs");
  REQUIRE(v.has_value());
  CHECK(v->vhost == "prod/jobs");
  CHECK(v->describe() == "amqp://u@h:5672/prod%2fjobs");
}

TEST_CASE("amqp url: without its password, read back as the same address; whether the URL had one") {
  auto a = parse_amqp_url("amqp://al%40ice:s3%3acret@broker.example:5673/prod%2Fjobs");
  REQUIRE(a.has_value());
  CHECK(a->user == "al@ice");
  CHECK(a->password == "s3:cret");
  CHECK(a->password_in_url);
  const std::string shown = a->url_without_password();
  CHECK(shown == "amqp://al%40ice@broker.example:5673/prod%2fjobs");
  CHECK(shown.find("s3") == std::string::npos);
  auto back = parse_amqp_url(shown);
  REQUIRE(back.has_value());
  CHECK(back->user == a->user);
  CHECK(back->host == a->host);
  CHECK(back->port == a->port);
  CHECK(back->vhost == a->vhost);
  CHECK_FALSE(back->password_in_url);
  CHECK(back->password == "guest");  // the spec's default, unless PILLBOX_AMQP_PASSWORD (the CLI) gives one

  for (const std::string none : {"amqp://alice@h/%2f", "amqp://h:5672/%2f", "amqp://h/x%3ay%40z"}) {
    CAPTURE(none);
    auto n = parse_amqp_url(none);
    REQUIRE(n.has_value());
    CHECK_FALSE(n->password_in_url);
  }
  auto empty = parse_amqp_url("amqp://alice:@h/%2f");  // an empty password is one
  REQUIRE(empty.has_value());
  CHECK(empty->password_in_url);
  CHECK(empty->password.empty());
}

TEST_CASE("amqp url: what is not one is a usage error that never echoes a password") {
  for (const char* bad : {"", "redis://127.0.0.1:6379", "http://u:hunter2@h", "amqp://u:hunter2@h:notaport/x", "amqp://u:hunter2@h:0/x",
                          "amqp://u:hunter2@h:99999999999/x"}) {
    const std::string given = bad;
    CAPTURE(given);
    auto r = parse_amqp_url(bad);
    REQUIRE_FALSE(r.has_value());
    CHECK(r.error_code() == pillbox::ErrorCode::kUsage);
    CHECK(r.error().find("hunter2") == std::string::npos);
    CHECK(r.error().find("amqp://USER:PASS@HOST:PORT/VHOST") != std::string::npos);
  }
  // A field that decodes to a control character or NUL (it would split an
  // error line, or cut the password short in C).
  for (const char* hidden : {"amqp://us%0aer:hunter2@h/", "amqp://u:hunter2@ho%0ast/", "amqp://u:hun%00ter2@h/",
                             "amqp://u:hunter2@h/v%0d"}) {
    const std::string given = hidden;
    CAPTURE(given);
    auto r = parse_amqp_url(given);
    REQUIRE_FALSE(r.has_value());
    CHECK(r.error().find("hunter2") == std::string::npos);
  }
  CHECK_FALSE(parse_amqp_url(std::string_view("amqp://u:hunter2@h\0:bad", 22)).has_value());
  auto tls = parse_amqp_url("amqps://u:hunter2@h:5671/%2f");
  REQUIRE_FALSE(tls.has_value());
  CHECK(tls.error().find("amqps:// is not supported") != std::string::npos);
  CHECK(tls.error().find("hunter2") == std::string::npos);
}

TEST_CASE("amqp topology: the queues' names and the work queue's arguments, at-least-once from 3.10") {
  const auto names = pillbox::broker::amqp_queue_names("jobs");
  CHECK(names.work == "jobs");
  CHECK(names.dlx == "jobs.dlx");
  CHECK(names.dlq == "jobs.dlq");
  CHECK(pillbox::broker::supports_at_least_once("3.10.8"));
  CHECK(pillbox::broker::supports_at_least_once("3.13.0"));
  CHECK(pillbox::broker::supports_at_least_once("4.0.1"));
  CHECK_FALSE(pillbox::broker::supports_at_least_once("3.9.29"));
  CHECK_FALSE(pillbox::broker::supports_at_least_once(""));
  pillbox::broker::AmqpTopologySettings s;
  s.queue = "jobs";
  s.delivery_limit = 7;
  const auto args = pillbox::broker::work_queue_arguments(s, true);
  REQUIRE(args.size() == 5);
  CHECK(args[0].name == "x-queue-type");
  CHECK(*args[0].value.text() == "quorum");
  CHECK(args[1].name == "x-delivery-limit");
  CHECK(args[1].value.integer() == 7);
  CHECK(*args[2].value.text() == "jobs.dlx");
  CHECK(*args[3].value.text() == "at-least-once");
  CHECK(*args[4].value.text() == "reject-publish");
  CHECK(pillbox::broker::work_queue_arguments(s, false).size() == 3);
}

TEST_CASE("amqp topology: a PRECONDITION_FAILED is one sentence naming the argument, both values, why and what to do") {
  const std::string where = "RabbitMQ at amqp://u@h:5672/%2f";
  pillbox::broker::AmqpTopologySettings settings;
  settings.queue = "jobs";
  const auto declared = pillbox::broker::work_queue_arguments(settings, true);
  const AmqpRefusal type{406,
                         "PRECONDITION_FAILED - inequivalent arg 'x-queue-type' for queue 'jobs' in vhost '/': received "
                         "the value 'quorum' of type 'longstr' but current is none"};
  const std::string s = pillbox::broker::explain_mismatch("jobs", where, type, declared);
  CHECK(s.rfind("queue 'jobs' exists on " + where + " with x-queue-type not set, but pillbox needs 'quorum' (a quorum "
                "queue,",
                0) == 0);
  CHECK(s.find("name another queue") != std::string::npos);
  CHECK(s.find(". pillbox declares it durable with x-queue-type quorum, x-delivery-limit 10, x-dead-letter-exchange "
               "jobs.dlx, x-dead-letter-strategy at-least-once, x-overflow reject-publish (RabbitMQ names the first "
               "difference it finds)") != std::string::npos);
  CHECK(s.find('\n') == std::string::npos);

  const AmqpRefusal limit{406,
                          "PRECONDITION_FAILED - inequivalent arg 'x-delivery-limit' for queue 'jobs' in vhost '/': "
                          "received the value '5' of type 'long' but current is the value '10' of type 'long'"};
  const std::string l = pillbox::broker::explain_mismatch("jobs", where, limit, declared);
  CHECK(l.find("with x-delivery-limit '10', but pillbox needs '5' (the deliveries the broker allows") != std::string::npos);

  const AmqpRefusal stream{406,
                           "PRECONDITION_FAILED - inequivalent arg 'x-queue-type' for queue 'jobs.dlq' in vhost '/': "
                           "received the value 'stream' of type 'longstr' but current is the value 'classic' of type "
                           "'longstr'"};
  CHECK(pillbox::broker::explain_mismatch("jobs.dlq", where, stream, {{"x-queue-type", std::string("stream")}}).find("'stream' (a stream queue, read by offset") !=
        std::string::npos);

  // Another refusal keeps the broker's words.
  const AmqpRefusal denied{403, "ACCESS_REFUSED - access to queue 'jobs' in vhost '/' refused for user 'u'"};
  CHECK(pillbox::broker::explain_mismatch("jobs", where, denied, declared) ==
        where + " refused queue 'jobs': ACCESS_REFUSED - access to queue 'jobs' in vhost '/' refused for user 'u'");
}
