// JSON another process wrote, read with bounds (supervisor/broker/
// untrusted_json.h): a dead letter, a record's state or a delivery nested
// 200,000 deep is unreadable, said so, and never parsed (printing one
// overflowed the stack of serve --redis and quarantine list --redis).
#include <doctest/doctest.h>

#include <string>

#include "supervisor/broker/delivery_history.h"
#include "supervisor/broker/fleet_record.h"
#include "supervisor/broker/fleet_state.h"
#include "supervisor/io/untrusted_json.h"

namespace {

using namespace pillbox;
using namespace pillbox::broker;

std::string nested(const std::string& name, std::size_t depth) {
  return "{\"" + name + "\":" + std::string(depth, '[') + std::string(depth, ']') + "}";
}

}  // namespace

TEST_CASE("untrusted json: nesting is counted outside strings only; too deep or too long is not parsed") {
  CHECK(json_nesting(R"({"a":[1,{"b":[]}]})", 100) == 4);
  CHECK(json_nesting(R"({"a":"[[[[\"[[[["})", 100) == 1);
  CHECK(json_nesting(std::string(1000, '['), 10) == 10);  // stops counting
  CHECK(parse_untrusted_json(nested("x", kMaxJsonDepth - 1), 1 << 20).why_not.empty());
  const UntrustedJson deep = parse_untrusted_json(nested("x", kMaxJsonDepth), 1 << 20);
  CHECK(deep.value.is_discarded());
  CHECK(deep.why_not == "it nests deeper than 64 levels");
  const UntrustedJson long_one = parse_untrusted_json("[1,2,3]", 3);
  CHECK(long_one.value.is_discarded());
  CHECK(long_one.why_not.find("7 bytes long") != std::string::npos);
  CHECK(parse_untrusted_json("nope", 100).why_not == "it is not JSON");
}

TEST_CASE("untrusted json: a dead letter, a state and a delivery nested 200000 deep are unreadable, not a crash") {
  const std::string deep = nested("crash_state", 200000);
  const FleetRecord r = parse_dead_letter("1712345678901-0", {{"key", "k"}, {"payload", "P"}, {"kind", "crash"},
                                                              {"fingerprint", "pb1-00"}, {"record", deep}});
  CHECK(r.record.entry.key == "k");
  CHECK(r.record.entry.kind == "crash");
  CHECK(r.record.entry.crash_state.empty());
  CHECK(r.record.entry.message.find("no readable `record` field (it nests deeper than 64 levels)") !=
        std::string::npos);
  const auto state = parse_state(R"({"status":"quarantined","audit":)" + std::string(200000, '[') +
                                 std::string(200000, ']') + "}");
  REQUIRE_FALSE(state);
  CHECK(state.error().find("nests deeper") != std::string::npos);
  CHECK_FALSE(parse_delivery(1, nested("crash_state", 200000)));
  CHECK_FALSE(parse_delivery(1, "{\"message\":\"" + std::string(1 << 20, 'x') + "\"}"));
}
