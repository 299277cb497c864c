// AMQP field tables as pillbox holds them (supervisor/broker/amqp_value.h)
// and RabbitMQ's x-death read from them (amqp_death.h): every wire type
// through rabbitmq-c's tables and back, nesting cut, the JSON an operator
// reads, and x-death's claims taken only as far as they are what RabbitMQ
// writes.
#include <doctest/doctest.h>

#include <cmath>
#include <limits>
#include <string>

#include "supervisor/broker/amqp_death.h"
#include "supervisor/broker/amqp_value.h"

using namespace pillbox::broker;

namespace {

// A table with one value of every wire type.
AmqpTable every_kind() {
  return {
      {"t", true},
      {"b", AmqpValue::of_kind('b', std::int64_t{-5})},
      {"s", AmqpValue::of_kind('s', std::int64_t{-300})},
      {"I", AmqpValue::of_kind('I', std::int64_t{-70000})},
      {"l", std::int64_t{-(std::int64_t{1} << 40)}},
      {"B", AmqpValue::of_kind('B', std::uint64_t{200})},
      {"u", AmqpValue::of_kind('u', std::uint64_t{60000})},
      {"i", AmqpValue::of_kind('i', std::uint64_t{4000000000u})},
      {"L", AmqpValue::of_kind('L', std::numeric_limits<std::uint64_t>::max())},
      {"T", AmqpValue::timestamp(1796158239)},
      {"f", AmqpValue::of_kind('f', 1.5)},
      {"d", AmqpValue::of_kind('d', -2.25)},
      {"D", AmqpValue::of_kind('D', AmqpDecimal{2, 12345})},
      {"S", std::string("text \xc3\xa9")},
      {"x", AmqpValue::of_kind('x', std::string("\x00\xff", 2))},
      {"A", AmqpValue::array({std::string("a"), std::int64_t{1}, AmqpValue::table({{"in", true}})})},
      {"F", AmqpValue::table({{"nested", std::string("yes")}})},
      {"V", AmqpValue{}},
  };
}

}  // namespace

TEST_CASE("amqp tables: every wire type through rabbitmq-c's table and back, unchanged") {
  const AmqpTable original = every_kind();
  AmqpTableEncoder encoder;
  const amqp_table_t encoded = encoder.encode(original);
  REQUIRE(encoded.num_entries == static_cast<int>(original.size()));
  bool cut = false;
  const AmqpTable back = table_from_amqp(encoded, &cut);
  CHECK_FALSE(cut);
  CHECK(original == back);
}

TEST_CASE("amqp tables: integers of every kind are read as such; what does not fit is not") {
  const AmqpTable t = every_kind();
  CHECK(find_field(t, "b")->integer() == -5);
  CHECK(find_field(t, "i")->integer() == 4000000000);
  CHECK(find_field(t, "T")->integer() == 1796158239);
  CHECK_FALSE(find_field(t, "L")->integer());  // 2^64 - 1: over int64
  CHECK_FALSE(find_field(t, "S")->integer());
  CHECK_FALSE(find_field(t, "d")->integer());
  CHECK(*find_field(t, "x")->text() == std::string("\x00\xff", 2));
  CHECK(find_field(t, "nope") == nullptr);
}

TEST_CASE("amqp tables: nesting deeper than the limit is cut, and said") {
  AmqpValue v = std::string("bottom");
  for (int i = 0; i < kMaxAmqpDepth + 5; ++i) v = AmqpValue::array({v});
  AmqpTableEncoder encoder;
  bool cut = false;
  const AmqpTable back = table_from_amqp(encoder.encode({{"deep", v}}), &cut);
  CHECK(cut);
  int depth = 0;
  const AmqpValue* at = find_field(back, "deep");
  while (at->items() != nullptr) {
    ++depth;
    at = &at->items()->front();
  }
  CHECK(depth == kMaxAmqpDepth - 1);  // the headers table itself is the first level
  CHECK(at->kind == 'V');
}

TEST_CASE("amqp tables: as JSON, bytes that are not UTF-8 and repeated names are kept visible") {
  AmqpTable t = every_kind();
  t.push_back({"S", std::string("again")});
  t.push_back({std::string("\xff"), true});
  t.push_back({"nan", AmqpValue::of_kind('d', std::nan(""))});
  const auto j = to_json(t);
  CHECK(j.at("S") == "text \xc3\xa9");
  CHECK(j.at("S (2)") == "again");
  CHECK(j.at("x").at("bytes_b64") == "AP8=");
  CHECK(j.at("bytes:/w==") == true);
  CHECK(j.at("T").at("timestamp") == 1796158239);
  CHECK(j.at("D").at("decimal") == 12345);
  CHECK(j.at("L") == std::numeric_limits<std::uint64_t>::max());
  CHECK(j.at("V").is_null());
  CHECK(j.at("A")[2].at("in") == true);
  CHECK(j.at("nan") == "nan");
  CHECK_NOTHROW((void)j.dump());
}

TEST_CASE("x-death: RabbitMQ's entries read; other reasons, bad types and floods are not taken as such") {
  auto death = [](AmqpValue reason, AmqpValue count, AmqpValue queue = std::string("jobs")) {
    return AmqpValue::table({{"count", std::move(count)},
                             {"reason", std::move(reason)},
                             {"queue", std::move(queue)},
                             {"time", AmqpValue::timestamp(1796158239)},
                             {"exchange", std::string("")},
                             {"routing-keys", AmqpValue::array({std::string("jobs")})}});
  };
  SUBCASE("as RabbitMQ writes them") {
    const AmqpTable headers = {{"x-death", AmqpValue::array({death("delivery_limit", std::int64_t{1}),
                                                              death("expired", std::int64_t{3}, "jobs.retry.100")})}};
    const AmqpDeaths d = deaths_of(headers);
    REQUIRE(d.deaths.size() == 2);
    CHECK(d.unreadable == 0);
    CHECK(d.deaths[0].reason == "delivery_limit");
    CHECK(d.deaths[0].queue == "jobs");
    CHECK(d.deaths[0].count == 1);
    CHECK(d.deaths[0].time_s == 1796158239);
    CHECK(d.deaths[0].routing_keys == std::vector<std::string>{"jobs"});
    CHECK(d.deaths[1].reason == "expired");
    CHECK(d.deaths[1].count == 3);
    const auto j = to_json(d);
    CHECK(j.at("deaths")[1].at("queue") == "jobs.retry.100");
    CHECK_FALSE(j.contains("unreadable"));
  }
  SUBCASE("claims that are not RabbitMQ's") {
    AmqpArray items = {death("made-up", std::int64_t{1}),
                       death("rejected", AmqpValue::of_kind('L', std::numeric_limits<std::uint64_t>::max())),
                       death("rejected", std::int64_t{-4}),
                       death("rejected", AmqpValue::of_kind('s', std::int64_t{7})),
                       death(std::int64_t{5}, std::int64_t{1}),   // a reason that is not a string
                       death("expired", std::int64_t{1}, ""),     // no queue
                       std::string("not a table")};
    for (int i = 0; i < 100; ++i) items.push_back(death("rejected", std::int64_t{1}));
    const AmqpDeaths d = deaths_of({{"x-death", AmqpValue::array(items)}});
    REQUIRE(d.deaths.size() == kMaxAmqpDeaths);
    CHECK(d.deaths[0].reason == "other");
    CHECK(d.deaths[0].said == "made-up");
    CHECK(d.deaths[1].count == 2147483647);  // a count over int64: the most, not none
    CHECK(d.deaths[2].count == 0);  // clamped
    CHECK(d.deaths[3].count == 7);  // any integer kind
    CHECK(d.unreadable == 3 + (100 - (kMaxAmqpDeaths - 4)));
  }
  SUBCASE("no x-death, or one that is not an array") {
    CHECK(deaths_of({}).deaths.empty());
    const AmqpDeaths d = deaths_of({{"x-death", std::string("rejected")}});
    CHECK(d.deaths.empty());
    CHECK(d.unreadable == 1);
  }
}
