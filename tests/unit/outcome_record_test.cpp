// One outcome record (supervisor/classify/outcome_record.h) and its two
// mappings: JSON (supervisor/classify/outcome_json.h), read back from what
// another process may have written, and SQL (supervisor/store/outcome_columns.h).
#include <doctest/doctest.h>

#include <csignal>
#include <nlohmann/json.hpp>

#include "supervisor/classify/outcome.h"
#include "supervisor/classify/outcome_json.h"
#include "supervisor/classify/outcome_record.h"
#include "tests/unit/store_fixture.h"

namespace {

using namespace pillbox;
using nlohmann::json;

OutcomeRecord crash_record() {
  Outcome o;
  o.kind = Kind::kCrash;
  o.signal = SIGSEGV;
  o.fingerprint = "pb1-0123456789abcdef";
  o.crash_state = {"parse_header", "main"};
  o.message = "killed by SIGSEGV";
  o.cpu_ms = 35;
  o.wall_ms = 40;
  o.max_rss_kb = 2048;
  return outcome_record(o);
}

TEST_CASE("outcome record: JSON round trip, the fields of an outcome and back") {
  const OutcomeRecord r = crash_record();
  CHECK(r.kind == "crash");
  CHECK(r.exit_code == -1);
  json j = json::object();
  put_outcome_record(r, j);
  CHECK(j.dump() ==
        R"({"cpu_ms":35,"crash_state":["parse_header","main"],"exit_code":null,"fingerprint":"pb1-0123456789abcdef",)"
        R"("kind":"crash","max_rss_kb":2048,"message":"killed by SIGSEGV","signal":"SIGSEGV","syscall":null,)"
        R"("wall_ms":40})");
  for (bool strict : {true, false}) {
    const auto back = read_outcome_record(j, strict);
    REQUIRE(back.has_value());
    CHECK(*back == r);
  }
  const Outcome o = outcome_of(r);
  CHECK(o.kind == Kind::kCrash);
  CHECK(o.signal == SIGSEGV);
  CHECK(o.crash_state == r.crash_state);
  CHECK(outcome_record(o) == r);
}

TEST_CASE("outcome record: an unknown kind reads as the caller says, protocol-error by default") {
  OutcomeRecord r;
  r.kind = "from-a-newer-pillbox";
  CHECK(outcome_of(r).kind == Kind::kProtocolError);
  r.kind = "";
  CHECK(outcome_of(r, Kind::kSupervisorLost).kind == Kind::kSupervisorLost);
}

TEST_CASE("outcome record: reads a signal by number as earlier deliveries wrote it, and nulls as defaults") {
  const auto r = read_outcome_record(json::parse(R"({"kind":"crash","signal":11,"exit_code":null,"fingerprint":null})"),
                                     /*strict=*/true);
  REQUIRE(r.has_value());
  CHECK(r->signal == 11);
  CHECK(r->exit_code == -1);
  CHECK(r->fingerprint.empty());
  // A name that is no signal, and frames that are not strings: refused when
  // strict, left out when not.
  CHECK_FALSE(read_outcome_record(json::parse(R"({"signal":"SIGNOTONE"})"), true).has_value());
  CHECK(read_outcome_record(json::parse(R"({"signal":"SIGNOTONE"})"), false)->signal == 0);
  CHECK_FALSE(read_outcome_record(json::parse(R"({"crash_state":["a",1,{"b":2},"c"]})"), true).has_value());
  CHECK(read_outcome_record(json::parse(R"({"crash_state":["a",1,{"b":2},"c"]})"), false)->crash_state ==
        std::vector<std::string>{"a", "c"});
}

TEST_CASE("outcome record: a field of the wrong type or out of range is refused when strict, left at its default when not") {
  for (const char* text : {R"({"kind":5,"message":"m"})", R"({"cpu_ms":1.5,"message":"m"})",
                           R"({"wall_ms":1e300,"message":"m"})", R"({"exit_code":4294967296,"message":"m"})",
                           R"({"exit_code":-1e30,"message":"m"})", R"({"signal":-3,"message":"m"})",
                           R"({"max_rss_kb":-1,"message":"m"})", R"({"cpu_ms":18446744073709551615,"message":"m"})",
                           R"({"fingerprint":["x"],"message":"m"})", R"({"syscall":{},"message":"m"})"}) {
    INFO(text);
    const json j = json::parse(text);
    CHECK_FALSE(read_outcome_record(j, /*strict=*/true).has_value());
    const auto lenient = read_outcome_record(j, /*strict=*/false);
    REQUIRE(lenient.has_value());
    CHECK(lenient->message == "m");  // the rest is still read
    OutcomeRecord expected;
    expected.message = "m";
    CHECK(*lenient == expected);
  }
  CHECK_FALSE(read_outcome_record(json::array(), true).has_value());
  CHECK(read_outcome_record(json::array(), false) == OutcomeRecord{});
}

TEST_CASE("outcome record: a crash state as one text and back; text that is not an array is one frame") {
  CHECK(crash_state_text({"a", "b"}) == R"(["a","b"])");
  CHECK(crash_state_text({"\xff"}) == "[\"\xef\xbf\xbd\"]");  // not UTF-8: replaced
  CHECK(crash_state_of_text(R"(["a","b"])") == std::vector<std::string>{"a", "b"});
  CHECK(crash_state_of_text(R"([1,"b"])") == std::vector<std::string>{"1", "b"});
  CHECK(crash_state_of_text("not json") == std::vector<std::string>{"not json"});
  CHECK(crash_state_of_text("{}") == std::vector<std::string>{"{}"});
}

TEST_CASE("outcome record: the quarantine's columns keep it field for field; a row's bad crash state is not lost") {
  test::StoreFixture env("outcome-record");
  const std::int64_t now = store::now_ms();
  REQUIRE(env.ledger->begin().is_ok());
  store::QuarantineEntry e = env.entry("k", "payload", "pb1-0123456789abcdef", now);
  static_cast<OutcomeRecord&>(e) = crash_record();
  e.syscall = "ptrace";
  e.exit_code = 7;
  auto r = env.qs->insert(e, "payload", now, "test");
  REQUIRE_MESSAGE(r.has_value(), r.error());
  REQUIRE(env.ledger->commit().is_ok());
  auto got = env.qs->get(r->id);
  REQUIRE(got.has_value());
  REQUIRE(got->has_value());
  CHECK(static_cast<const OutcomeRecord&>((*got)->entry) == static_cast<const OutcomeRecord&>(e));
  REQUIRE(env.db().exec("UPDATE quarantine SET crash_state = 'not json' WHERE id = " + std::to_string(r->id)).is_ok());
  CHECK((*env.qs->get(r->id))->entry.crash_state == std::vector<std::string>{"not json"});
}

}  // namespace
