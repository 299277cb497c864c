#include "supervisor/io/time_args.h"

#include <ctime>
#include <limits>
#include <optional>
#include <string_view>

namespace pillbox {
namespace {

constexpr std::uint64_t kSecond = 1000;

std::optional<std::uint64_t> unit_ms(std::string_view unit) {
  if (unit.empty() || unit == "s") return kSecond;  // a bare number means seconds
  if (unit == "ms") return 1;
  if (unit == "m") return 60 * kSecond;
  if (unit == "h") return 3600 * kSecond;
  if (unit == "d") return 24 * 3600 * kSecond;
  return std::nullopt;
}

// "1500ms", "1.5s", "90s", "1m 30s" is not one: ms as the shortest exact form.
std::string format_ms(std::uint64_t ms) {
  if (ms % kSecond != 0 || ms == 0) return std::to_string(ms) + "ms";
  if (ms % (24 * 3600 * kSecond) == 0) return std::to_string(ms / (24 * 3600 * kSecond)) + "d";
  if (ms % (3600 * kSecond) == 0) return std::to_string(ms / (3600 * kSecond)) + "h";
  if (ms % (60 * kSecond) == 0) return std::to_string(ms / (60 * kSecond)) + "m";
  return std::to_string(ms / kSecond) + "s";
}

}  // namespace

Expected<std::uint64_t> parse_duration_arg(const std::string& text, const std::string& option, std::uint64_t min_ms,
                                           std::uint64_t max_ms) {
  const auto bad = [&] {
    return Error{option + " expects a duration such as 500ms, 0.5s, 1.5m, 2h or 7d (a bare number means seconds), got '" +
                 text + "'"};
  };
  // Digits, an optional '.' and digits (at least one digit in all), a unit.
  std::size_t i = 0;
  std::string whole, fraction;
  while (i < text.size() && text[i] >= '0' && text[i] <= '9') whole += text[i++];
  if (i < text.size() && text[i] == '.') {
    for (++i; i < text.size() && text[i] >= '0' && text[i] <= '9';) fraction += text[i++];
  }
  const auto factor = unit_ms(std::string_view(text).substr(i));
  if ((whole.empty() && fraction.empty()) || !factor) return bad();
  const auto out_of_range = [&] {
    return Error{option + " '" + text + "' is out of range; use " + format_ms(min_ms) + " to " + format_ms(max_ms)};
  };
  // Whole numbers exactly, in 64 bits; the fraction to nine digits (below a
  // nanosecond of a day), rounded to the nearest millisecond.
  while (whole.size() > 1 && whole.front() == '0') whole.erase(0, 1);
  if (whole.size() > 18) return out_of_range();
  const std::uint64_t units = whole.empty() ? 0 : std::stoull(whole);
  if (units > std::numeric_limits<std::uint64_t>::max() / *factor - 1) return out_of_range();
  fraction.resize(9, '0');
  const std::uint64_t billionths = std::stoull(fraction);
  const std::uint64_t ms = units * *factor + (billionths * *factor + 500'000'000) / 1'000'000'000;
  if (ms == 0 && min_ms > 0 && (units > 0 || billionths > 0)) {
    return Error{option + " '" + text + "' is less than 1ms; use at least " + format_ms(min_ms)};
  }
  if (ms < min_ms || ms > max_ms) return out_of_range();
  return ms;
}

Expected<std::int64_t> parse_since(const std::string& text, const std::string& option, std::int64_t now_ms) {
  if (auto age = parse_duration_arg(text, option, 0, 100ull * 365 * 24 * 3600 * 1000)) {
    return now_ms - static_cast<std::int64_t>(*age);
  }
  // A UTC date, optionally with a time; nothing may follow.
  for (const char* format : {"%Y-%m-%dT%H:%M:%SZ", "%Y-%m-%dT%H:%M:%S", "%Y-%m-%dT%H:%MZ", "%Y-%m-%dT%H:%M",
                             "%Y-%m-%d"}) {
    std::tm tm{};
    const char* end = ::strptime(text.c_str(), format, &tm);
    if (end != nullptr && *end == '\0') return static_cast<std::int64_t>(::timegm(&tm)) * 1000;
  }
  return Error{option + " expects an age (e.g. 30m, 24h, 7d) or a UTC date (2026-11-30 or 2026-11-30T12:00:00Z), got '" +
               text + "'"};
}

}  // namespace pillbox
