// What a replay republishes for a dead letter of NAME.dlq (amqp_redrive.h):
// the original's ids, reply_to and own headers, and the new tag; never the
// broker's x-*, pillbox's own record and history, an earlier tag, or the
// headers that would route it to other queues too.
#include <doctest/doctest.h>

#include <nlohmann/json.hpp>

#include "supervisor/broker/amqp_dead_letter.h"
#include "supervisor/broker/amqp_redrive.h"

using namespace pillbox::broker;

namespace {

const ReplayTag kTag{"0123456789abcdef0123456789abcdef", "7"};

// A published message as a reader gets it back.
AmqpMessage as_read(const AmqpOutgoing& m) {
  AmqpMessage r;
  r.body = std::string(m.body);
  r.body_size = r.body.size();
  r.message_id = m.message_id;
  r.correlation_id = m.correlation_id;
  r.reply_to = m.reply_to;
  r.headers = m.headers;
  return r;
}

int count(const AmqpTable& headers, std::string_view name) {
  int n = 0;
  for (const AmqpField& f : headers) n += f.name == name ? 1 : 0;
  return n;
}

}  // namespace

TEST_CASE("a pillbox dead letter is republished as its original was sent, with the replay's tag") {
  AmqpMessage original;
  original.body = "S payload";
  original.message_id = "order-7";
  original.correlation_id = "req-9";
  original.reply_to = "replies";
  original.headers = {{"key", std::string("order-7")},       {"tenant", std::string("acme")},
                      {"CC", std::string("elsewhere")},        {"x-delivery-count", AmqpValue(std::int64_t{2})},
                      {"pillbox-deliveries", AmqpValue(1)},    {"pillbox-replay", std::string("ffffffffffffffffffffffffffffffff")},
                      {"pillbox-replay-of", std::string("3")}};
  const AmqpOutgoing dead = dead_letter_message(original, "order-7", "jobs", nlohmann::json{{"kind", "crash"}});
  const AmqpMessage read = as_read(dead);
  const AmqpOutgoing m = redrive_message(read, kTag);
  CHECK(m.body == "S payload");
  CHECK(m.message_id == "order-7");
  CHECK(m.correlation_id == "req-9");
  CHECK(m.reply_to == "replies");  // from pillbox-original: a dead letter has none of its own
  CHECK(count(m.headers, "key") == 1);
  CHECK(count(m.headers, "tenant") == 1);
  CHECK(count(m.headers, "CC") == 0);
  for (const AmqpField& f : m.headers) {
    INFO(f.name);
    CHECK(f.name.rfind("x-", 0) != 0);
    if (f.name.rfind("pillbox-", 0) == 0) CHECK(is_replay_tag_header(f.name));
  }
  const auto tag = replay_tag(m.headers);  // one of each: the earlier tag is gone
  REQUIRE(tag.has_value());
  CHECK(tag->attempt == kTag.attempt);
  CHECK(tag->record == "7");
}

TEST_CASE("a dead letter the broker wrote is republished with its own properties, without the broker's headers") {
  AmqpMessage dead;
  dead.body = "S payload";
  dead.message_id = "m-1";
  dead.reply_to = "rpc-queue";
  dead.headers = {{"key", std::string("k-1")},
                  {"x-first-death-reason", std::string("delivery_limit")},
                  {"x-death", AmqpValue::array({AmqpValue("whatever")})},
                  {"pillbox-attempts", std::string("[]")},
                  {"BCC", std::string("other")}};
  const AmqpOutgoing m = redrive_message(dead, kTag);
  CHECK(m.reply_to == "rpc-queue");
  CHECK(m.message_id == "m-1");
  CHECK(count(m.headers, "key") == 1);
  CHECK(count(m.headers, "BCC") == 0);
  CHECK(count(m.headers, "x-death") == 0);
  CHECK(count(m.headers, "pillbox-attempts") == 0);
  CHECK(replay_tag(m.headers).has_value());

  SUBCASE("a reply_to that cannot be sent is none") {
    dead.reply_to = std::string("a\0b", 3);
    CHECK(redrive_message(dead, kTag).reply_to.empty());
  }
}
