#include "supervisor/broker/amqp_doctor.h"


#include <cstdio>

#include "supervisor/broker/amqp_dead_letter.h"
#include "supervisor/broker/amqp_topology.h"
#include "supervisor/io/random_hex.h"

namespace pillbox::broker {
namespace {

using Clock = std::chrono::steady_clock;

DoctorCheck named(std::string name) {
  DoctorCheck c;
  c.name = std::move(name);
  return c;
}

DoctorCheck failed(DoctorCheck c, std::string detail, std::string fallback) {
  c.ok = false;
  c.detail = std::move(detail);
  c.fallback = std::move(fallback);
  return c;
}

const std::string* text_of(const AmqpMessage& m, std::string_view name) {
  const AmqpValue* v = find_field(m.headers, name);
  return v != nullptr ? v->text() : nullptr;
}

DoctorCheck check_route(const AmqpDoctorSettings& s) {
  const AmqpQueueNames names = amqp_queue_names(s.queue);
  DoctorCheck check = named("RabbitMQ dead-letter route " + names.dlx + " -> " + names.dlq);
  const std::string lost = "dead letters of " + s.queue + " would be lost: a worker declares " + names.dlx + ", " +
                           names.dlq + " and their binding when it starts; check that nothing removed them";
  auto reader = AmqpConnection::open(s.address);
  if (!reader) return failed(check, reader.error(), lost);
  if (auto found = reader->check_queue(names.dlq); !found) return failed(check, found.error(), lost);
  // From its end: only what arrives from now on.
  if (auto s2 = reader->consume(names.dlq, 64, {{"x-stream-offset", std::string("next")}}); !s2) {
    return failed(check, s2.message(), lost);
  }
  // The canary's id, so that two doctors (or a canary of an earlier run
  // still on its way) are told apart.
  auto id = random_hex(8);
  if (!id) return failed(check, "no canary: " + id.error(), "");
  const std::string canary_queue = canary_queue_name(s.queue, *id);
  auto sender = AmqpConnection::open(s.address);
  if (!sender) return failed(check, sender.error(), lost);
  // Dead-letters as NAME does (a quorum queue, at least once where the
  // broker has it: RabbitMQ 3.10 dropped what a classic queue dead-lettered,
  // at most once, into the stream, while a classic queue bound beside it
  // got it), expiring what it holds at once into NAME.dlx; the broker
  // deletes the queue itself a minute after its last use, should this
  // process die.
  std::vector<AmqpField> arguments = {{"x-queue-type", std::string("quorum")},
                                      {"x-message-ttl", std::int64_t{0}},
                                      {"x-dead-letter-exchange", names.dlx},
                                      {"x-expires", std::int64_t{60'000}}};
  if (supports_at_least_once(sender->server_version())) {
    arguments.push_back({"x-dead-letter-strategy", std::string("at-least-once")});
    arguments.push_back({"x-overflow", std::string("reject-publish")});
  }
  if (auto q = sender->declare_queue(canary_queue, arguments); !q) return failed(check, q.error(), lost);
  AmqpOutgoing canary;
  canary.body = "pillbox doctor: a canary of the dead-letter route, not a task";
  canary.message_id = "pillbox-canary-" + *id;
  canary.headers = {{std::string(kCanaryHeader), *id}, {"key", std::string("pillbox-doctor-canary")}};
  const auto sent_at = Clock::now();
  Status sent = sender->confirm_publishes();
  if (sent) sent = sender->publish(canary_queue, canary);
  if (sent) sent = sender->wait_confirmed();
  if (!sent) {
    (void)sender->delete_queue(canary_queue);
    return failed(check, "the canary was not published: " + sent.message(), lost);
  }
  const auto deadline = sent_at + s.canary_wait;
  for (;;) {
    const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now());
    if (left.count() <= 0) break;
    auto m = reader->next(left);
    if (!m) {
      (void)sender->delete_queue(canary_queue);
      return failed(check, "reading " + names.dlq + ": " + m.error(), lost);
    }
    if (!*m) break;  // the wait is over
    (void)reader->ack((*m)->delivery_tag);  // a stream's credit; nothing is removed
    const std::string* got = text_of(**m, kCanaryHeader);
    if (got == nullptr || *got != *id || !is_canary(**m, s.queue)) continue;  // another dead letter meanwhile
    const auto ms = std::chrono::duration_cast<std::chrono::milliseconds>(Clock::now() - sent_at).count();
    const AmqpDeadLetter d = read_dead_letter(**m);
    (void)sender->delete_queue(canary_queue);
    check.ok = true;
    check.detail = "a canary expired into " + names.dlx + " reached " + names.dlq + " in " + std::to_string(ms) +
                   " ms (offset " + std::to_string(d.offset) +
                   "); it stays there, marked as doctor's (a stream cannot delete a message)";
    return check;
  }
  (void)sender->delete_queue(canary_queue);
  return failed(check,
                "a canary expired into " + names.dlx + " did not reach " + names.dlq + " within " +
                    std::to_string(s.canary_wait.count()) + " ms",
                "dead letters of " + s.queue + " would be lost: is " + names.dlq + " bound to the fanout exchange " +
                    names.dlx + "? (a worker binds it when it starts; --canary-wait waits longer)");
}

DoctorCheck check_work_queue(const AmqpDoctorSettings& s) {
  DoctorCheck check = named("RabbitMQ work queue " + s.queue);
  auto c = AmqpConnection::open(s.address);
  if (!c) return failed(check, c.error(), "");
  if (auto found = c->check_queue(s.queue); !found) {
    if (c->refusal() && c->refusal()->code == 404) {
      return failed(check, s.queue + " does not exist yet",
                    "pillbox submit --amqp or pillbox worker --amqp declares it (a quorum queue with its delivery "
                    "limit and dead-letter exchange)");
    }
    return failed(check, found.error(), "");
  }
  const bool at_least_once = supports_at_least_once(c->server_version());
  const auto arguments = work_queue_arguments({.queue = s.queue, .delivery_limit = s.delivery_limit}, at_least_once);
  // The same arguments again: nothing changes when they match.
  auto declared = c->declare_queue(s.queue, arguments);
  if (!declared) {
    const std::string where = "RabbitMQ at " + s.address.describe();
    return failed(check, c->refusal() ? explain_mismatch(s.queue, where, *c->refusal(), arguments) : declared.error(),
                  "");
  }
  check.ok = true;
  check.detail = "a quorum queue, x-delivery-limit " + std::to_string(s.delivery_limit) + ", dead letters to " +
                 amqp_queue_names(s.queue).dlx + (at_least_once ? " at least once" : "") + "; " +
                 std::to_string(declared->messages) + " ready, " + std::to_string(declared->consumers) + " consumers";
  return check;
}

}  // namespace

std::vector<DoctorCheck> check_amqp_fleet(const AmqpDoctorSettings& s) {
  std::vector<DoctorCheck> checks;
  DoctorCheck connection = named("RabbitMQ connection");
  auto c = AmqpConnection::open(s.address);
  if (!c) {
    checks.push_back(failed(connection, c.error(), "the route and the queue were not checked"));
    return checks;
  }
  connection.ok = true;
  connection.detail = s.address.describe() + ", RabbitMQ " + c->server_version();
  checks.push_back(std::move(connection));
  checks.push_back(check_route(s));  // first: nothing before it declares or binds
  checks.push_back(check_work_queue(s));
  return checks;
}

}  // namespace pillbox::broker
