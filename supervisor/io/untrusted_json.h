#pragma once
// JSON anyone who can write to Redis may have written (dead letters,
// delivery histories, NAME:dlq:state), read with bounds: nlohmann's dump()
// and comparisons recurse per level, so a value nested 200,000 deep would
// overflow the stack of whoever prints it. Too deep or too long is
// unreadable, never parsed.
#include <cstddef>
#include <cstdint>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <string_view>

namespace pillbox {

// Deeper than any value pillbox writes (a record's deepest is its origin or
// handler_args: a few levels).
constexpr std::size_t kMaxJsonDepth = 64;

// The deepest nesting of [ and { outside strings; counting stops at `stop_at`.
std::size_t json_nesting(std::string_view text, std::size_t stop_at);

struct UntrustedJson {
  nlohmann::json value;  // discarded (value.is_discarded()) when not read
  std::string why_not;   // "" when read; else why, to put in a message
};

// `text` parsed when it is at most `max_bytes` long, nests at most
// kMaxJsonDepth levels and is JSON.
UntrustedJson parse_untrusted_json(std::string_view text, std::size_t max_bytes);

// `v` as a whole number that fits an int64; nullopt for anything else (a
// float: converting 1e300 to an integer is undefined behaviour, which
// nlohmann's get<>() does not guard against).
std::optional<std::int64_t> json_whole_number(const nlohmann::json& v);

}  // namespace pillbox
