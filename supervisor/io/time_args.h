#pragma once
// Durations and points in time on the command line. A duration is a number
// with an optional fraction and a unit, as GNU timeout takes them: "500ms",
// "0.5s", "1.5m", "2.25h", "7d" (a bare number means seconds). A point in
// time (`--since`) is an age ("24h", "1.5d": that long ago) or a UTC date
// ("2026-11-30", "2026-11-30T12:00:00Z").
#include <cstdint>
#include <string>

#include "shared/status.h"

namespace pillbox {

// A duration in milliseconds, rounded to the nearest, within [min_ms, max_ms].
// Refused, with `option` named: no digits, a sign, an exponent, "inf" or
// "nan", an unknown unit, more than 18 digits, out of range, and a value
// above 0 that rounds to 0 ms when 0 is not allowed.
Expected<std::uint64_t> parse_duration_arg(const std::string& text, const std::string& option, std::uint64_t min_ms,
                                           std::uint64_t max_ms);

// Milliseconds since the Unix epoch. `now_ms` anchors ages.
Expected<std::int64_t> parse_since(const std::string& text, const std::string& option, std::int64_t now_ms);

}  // namespace pillbox
