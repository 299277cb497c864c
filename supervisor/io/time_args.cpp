#include "supervisor/io/time_args.h"

#include <ctime>

#include "shared/policy_parser.h"

namespace pillbox {

Expected<std::int64_t> parse_since(const std::string& text, const std::string& option, std::int64_t now_ms) {
  if (auto age = parse_duration_ms(text, option, 0, 100ull * 365 * 24 * 3600 * 1000)) {
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
