// A record id of the fleet's quarantine on RabbitMQ (amqp_quarantine.h):
// an offset in NAME.dlq, one text per record, anything else a usage error
// that says what an id is there.
#include <doctest/doctest.h>

#include "supervisor/broker/amqp_quarantine.h"

using pillbox::ErrorCode;
using pillbox::broker::parse_amqp_record_id;

TEST_CASE("amqp record id: an offset, written one way") {
  CHECK(parse_amqp_record_id("0").value() == "0");
  CHECK(parse_amqp_record_id("42").value() == "42");
  CHECK(parse_amqp_record_id("007").value() == "7");
  CHECK(parse_amqp_record_id("999999999999999999").value() == "999999999999999999");
  for (const char* bad : {"", "-1", "+1", "1.0", "1712345678901-0", "0x10", " 1", "1 ", "1234567890123456789",
                          "\x31\xd9\xa0"}) {
    CAPTURE(bad);
    auto id = parse_amqp_record_id(bad);
    REQUIRE_FALSE(id.has_value());
    CHECK(id.error_code() == ErrorCode::kUsage);
    CHECK(id.error().find("offsets in the stream NAME.dlq") != std::string::npos);
  }
}
