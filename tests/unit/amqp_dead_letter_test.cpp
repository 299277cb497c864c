// A dead letter on RabbitMQ as pillbox writes and reads it
// (supervisor/broker/amqp_dead_letter.h): everything an operator needs
// survives as JSON text in scalar headers (what a stream queue keeps), the
// original's scalar headers go on (a decimal as text), what the original
// claimed as pillbox's is not carried, oversized parts say so, and a dead
// letter someone else forged reads as unreadable, never thrown.
#include <doctest/doctest.h>

#include <string>

#include "supervisor/broker/amqp_dead_letter.h"

using namespace pillbox::broker;
using json = nlohmann::json;

namespace {

AmqpMessage original() {
  AmqpMessage m;
  m.body = std::string("payload \x00\xff", 10);
  m.message_id = "order-17";
  m.correlation_id = "req-42";
  m.reply_to = "amq.rabbitmq.reply-to.abc";
  m.headers = {
      {"key", std::string("report-7.pdf")},
      {"tenant", std::string("acme")},
      {"price", AmqpValue::of_kind('D', AmqpDecimal{2, 12345})},
      {"tags", AmqpValue::array({std::string("a"), std::string("b")})},
      {"x-delivery-count", std::int64_t{3}},
      {"pillbox-record", std::string("{\"kind\": \"forged\"}")},
      {"x-death", AmqpValue::array({AmqpValue::table({{"reason", std::string("expired")},
                                                       {"queue", std::string("jobs.delay.1024")},
                                                       {"count", std::int64_t{2}}})})},
  };
  return m;
}

// What the broker hands back for an outgoing message (its headers and
// properties as sent; a stream also adds x-stream-offset).
AmqpMessage as_received(const AmqpOutgoing& out) {
  AmqpMessage m;
  m.body = std::string(out.body);
  m.message_id = out.message_id;
  m.correlation_id = out.correlation_id;
  m.reply_to = out.reply_to;
  m.headers = out.headers;
  m.headers.push_back({"x-stream-offset", std::int64_t{7}});
  if (const AmqpValue* key = find_field(m.headers, "key"); key != nullptr && key->text()) m.key = *key->text();
  return m;
}

const json kRecord = {{"kind", "crash"}, {"fingerprint", "pb1-abc"}, {"attempts", 2}};

}  // namespace

TEST_CASE("amqp dead letter: what pillbox writes reads back whole, in headers a stream queue keeps") {
  const AmqpMessage m = original();
  const AmqpOutgoing out = dead_letter_message(m, "report-7.pdf", "jobs", kRecord);
  CHECK(out.body == m.body);
  CHECK(out.message_id == "order-17");
  CHECK(out.correlation_id == "req-42");
  CHECK(out.reply_to.empty());  // a dead letter is no request: nothing replies to it
  for (const AmqpField& f : out.headers) {
    CHECK_MESSAGE((f.value.kind != 'A' && f.value.kind != 'F' && f.value.kind != 'D'), f.name);  // scalars only
    CHECK_MESSAGE(f.name.rfind("x-", 0) != 0, f.name);                                             // not the broker's
  }
  CHECK(*find_field(out.headers, "tenant")->text() == "acme");
  CHECK(*find_field(out.headers, "price")->text() == "123.45");
  CHECK(find_field(out.headers, "tags") == nullptr);

  const AmqpDeadLetter d = read_dead_letter(as_received(out));
  CHECK(d.unreadable.empty());
  CHECK(d.from_pillbox());
  CHECK(d.record == kRecord);  // pillbox's, not the forged one the original carried
  CHECK(d.key == "report-7.pdf");
  CHECK(d.queue == "jobs");
  CHECK(d.payload == m.body);
  CHECK(d.offset == 7);
  CHECK(d.original.at("message_id") == "order-17");
  CHECK(d.original.at("reply_to") == "amq.rabbitmq.reply-to.abc");
  CHECK(d.original.at("headers").at("tags") == json::array({"a", "b"}));
  CHECK(d.original.at("headers").at("price").at("decimal") == 12345);
  CHECK(d.original.at("headers").at("pillbox-record") == "{\"kind\": \"forged\"}");  // kept as what it was
  CHECK(d.x_death.at("deaths")[0].at("reason") == "expired");
  CHECK(d.x_death.at("deaths")[0].at("count") == 2);
}

TEST_CASE("amqp dead letter: decimals as text, names and ids AMQP cannot carry left to the JSON") {
  AmqpMessage m = original();
  m.message_id = std::string("id\0with-nul", 11);
  m.headers.push_back({"small", AmqpValue::of_kind('D', AmqpDecimal{4, 5})});
  m.headers.push_back({"whole", AmqpValue::of_kind('D', AmqpDecimal{0, 9})});
  m.headers.push_back({std::string("bad\0name", 8), std::string("v")});
  const AmqpOutgoing out = dead_letter_message(m, "k", "jobs", kRecord);
  CHECK(out.message_id.empty());
  CHECK(*find_field(out.headers, "small")->text() == "0.0005");
  CHECK(*find_field(out.headers, "whole")->text() == "9");
  CHECK(find_field(out.headers, std::string("bad\0name", 8)) == nullptr);
  const AmqpDeadLetter d = read_dead_letter(as_received(out));
  CHECK(d.original.at("message_id").get<std::string>().size() == 11);
  CHECK(d.key == "k");
}

TEST_CASE("amqp dead letter: parts over the limit say so; the headers stay within a frame") {
  AmqpMessage m = original();
  for (int i = 0; i < 100; ++i) m.headers.push_back({"h" + std::to_string(i), std::string(1000, 'x')});
  json big = kRecord;
  big["stderr_tail"] = std::string(kMaxDeadLetterJson, 'e');
  const AmqpOutgoing out = dead_letter_message(m, "k", "jobs", big);
  std::size_t bytes = 0;
  for (const AmqpField& f : out.headers) bytes += f.name.size() + (f.value.text() ? f.value.text()->size() : 8);
  CHECK(bytes < (110u << 10));
  const AmqpDeadLetter d = read_dead_letter(as_received(out));
  CHECK(d.record.at("omitted").get<std::string>().find("the record of") == 0);
  CHECK(d.original.at("omitted").get<std::string>().find("the original message's properties of") == 0);
  CHECK(d.unreadable.empty());
}

TEST_CASE("amqp dead letter: one forged or broken reads as unreadable, never thrown; the broker's own reads as such") {
  SUBCASE("the broker's own (past x-delivery-limit): no record, its first death") {
    AmqpMessage m;
    m.body = "kills workers";
    m.message_id = "m-9";
    m.headers = {{"x-first-death-reason", std::string("delivery_limit")},
                 {"x-first-death-queue", std::string("jobs")},
                 {"x-stream-offset", std::int64_t{3}}};
    const AmqpDeadLetter d = read_dead_letter(m);
    CHECK_FALSE(d.from_pillbox());
    CHECK(d.unreadable.empty());
    CHECK(d.first_death_reason == "delivery_limit");
    CHECK(d.queue == "jobs");
    CHECK(d.key == "m-9");
    CHECK(d.offset == 3);
  }
  SUBCASE("parts that are not what pillbox writes") {
    AmqpMessage m;
    m.headers = {{"pillbox-record", std::int64_t{5}},
                 {"pillbox-original", std::string("{not json")},
                 {"pillbox-x-death", std::string(std::string(100, '[') + std::string(100, ']'))}};
    const AmqpDeadLetter d = read_dead_letter(m);
    CHECK_FALSE(d.from_pillbox());
    CHECK(d.original.is_null());
    CHECK(d.x_death.is_null());
    CHECK(d.unreadable.find("pillbox-record: not a string") != std::string::npos);
    CHECK(d.unreadable.find("pillbox-original:") != std::string::npos);
    CHECK(d.unreadable.find("pillbox-x-death:") != std::string::npos);
  }
  SUBCASE("a record that is JSON but not an object") {
    AmqpMessage m;
    m.headers = {{"pillbox-record", std::string("[1, 2]")}};
    const AmqpDeadLetter d = read_dead_letter(m);
    CHECK_FALSE(d.from_pillbox());
    CHECK(d.unreadable.find("pillbox-record: not a JSON object") != std::string::npos);
  }
}
