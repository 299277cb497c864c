// Durations on the command line (supervisor/io/time_args.h): decimals as
// GNU timeout takes them, everything else refused with the option named.
#include <doctest/doctest.h>

#include <cstdint>
#include <string>

#include "supervisor/io/time_args.h"

namespace pillbox {
namespace {

constexpr std::uint64_t kMax = 100ull * 365 * 24 * 3600 * 1000;

std::uint64_t ms(const std::string& text, std::uint64_t min = 0, std::uint64_t max = kMax) {
  auto v = parse_duration_arg(text, "--timeout", min, max);
  REQUIRE_MESSAGE(v.has_value(), v.error());
  return *v;
}

std::string err(const std::string& text, std::uint64_t min = 0, std::uint64_t max = kMax) {
  auto v = parse_duration_arg(text, "--timeout", min, max);
  REQUIRE_FALSE(v.has_value());
  return v.error();
}

TEST_CASE("durations: whole numbers and decimals, with a unit or in seconds") {
  CHECK(ms("500ms") == 500);
  CHECK(ms("10s") == 10'000);
  CHECK(ms("10") == 10'000);
  CHECK(ms("0.5s") == 500);
  CHECK(ms("0.5") == 500);
  CHECK(ms(".5s") == 500);
  CHECK(ms("1.s") == 1000);
  CHECK(ms("1.5m") == 90'000);
  CHECK(ms("2.25h") == 8'100'000);
  CHECK(ms("7d") == 604'800'000);
  CHECK(ms("0.001s") == 1);
  CHECK(ms("0.0015s") == 2);  // to the nearest millisecond
  CHECK(ms("1.0004s") == 1000);
  CHECK(ms("0") == 0);
  CHECK(ms("0.0s") == 0);
  CHECK(ms("000000000000000000000000001s") == 1000);  // leading zeros are not digits of size
  CHECK(ms("1.123456789123456789s") == 1123);  // digits past a nanosecond do not matter
}

TEST_CASE("durations: garbage, signs, exponents, inf and nan are refused, naming the option") {
  for (const char* bad : {"", "s", ".", ".s", "-1s", "+1s", "1e3", "1e3s", "inf", "nan", "NaN", "infinity", "0x10",
                          "1.5.5s", "1,5s", "1 s", " 1s", "1s ", "1sec", "1S", "5x", "1.5ms5", "--", "1..5s"}) {
    INFO(bad);
    const std::string e = err(bad);
    CHECK(e.starts_with("--timeout expects a duration such as 500ms, 0.5s, 1.5m, 2h or 7d"));
    CHECK(e.find("got '" + std::string(bad) + "'") != std::string::npos);
  }
}

TEST_CASE("durations: out of range, overflow, and a value that rounds to 0 ms where 0 is not allowed") {
  CHECK(err("0.0004s", 1) == "--timeout '0.0004s' is less than 1ms; use at least 1ms");
  CHECK(err("0.0001ms", 100) == "--timeout '0.0001ms' is less than 1ms; use at least 100ms");
  CHECK(err("0", 100) == "--timeout '0' is out of range; use 100ms to 36500d");
  CHECK(err("99ms", 100) == "--timeout '99ms' is out of range; use 100ms to 36500d");
  CHECK(err("36501d") == "--timeout '36501d' is out of range; use 0ms to 36500d");
  CHECK(err("18446744073709551616s").find("out of range") != std::string::npos);
  CHECK(err("99999999999999999999999999999999999d").find("out of range") != std::string::npos);
  CHECK(err("213503982336d", 0, UINT64_MAX).find("out of range") != std::string::npos);
  CHECK(ms("1.5s", 1500, 1500) == 1500);
}

TEST_CASE("durations: --since takes a decimal age too") {
  auto since = parse_since("1.5h", "--since", 10'000'000);
  REQUIRE(since.has_value());
  CHECK(*since == 10'000'000 - 5'400'000);
}

}  // namespace
}  // namespace pillbox
