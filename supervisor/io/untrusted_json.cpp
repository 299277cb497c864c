#include "supervisor/io/untrusted_json.h"

#include <limits>

namespace pillbox {

std::size_t json_nesting(std::string_view text, std::size_t stop_at) {
  std::size_t depth = 0, deepest = 0;
  bool in_string = false, escaped = false;
  for (const char c : text) {
    if (in_string) {
      if (escaped) {
        escaped = false;
      } else if (c == '\\') {
        escaped = true;
      } else if (c == '"') {
        in_string = false;
      }
      continue;
    }
    if (c == '"') {
      in_string = true;
    } else if (c == '[' || c == '{') {
      if (++depth > deepest && (deepest = depth) >= stop_at) return deepest;
    } else if ((c == ']' || c == '}') && depth > 0) {
      --depth;
    }
  }
  return deepest;
}

UntrustedJson parse_untrusted_json(std::string_view text, std::size_t max_bytes) {
  UntrustedJson out;
  out.value = nlohmann::json(nlohmann::json::value_t::discarded);
  if (text.size() > max_bytes) {
    out.why_not = "it is " + std::to_string(text.size()) + " bytes long, more than the " + std::to_string(max_bytes) +
                  " read";
    return out;
  }
  if (json_nesting(text, kMaxJsonDepth + 1) > kMaxJsonDepth) {
    out.why_not = "it nests deeper than " + std::to_string(kMaxJsonDepth) + " levels";
    return out;
  }
  out.value = nlohmann::json::parse(text, nullptr, false);
  if (out.value.is_discarded()) out.why_not = "it is not JSON";
  return out;
}

std::optional<std::int64_t> json_whole_number(const nlohmann::json& v) {
  if (v.is_number_unsigned()) {
    const auto u = v.get<std::uint64_t>();
    if (u > static_cast<std::uint64_t>(std::numeric_limits<std::int64_t>::max())) return std::nullopt;
    return static_cast<std::int64_t>(u);
  }
  if (v.is_number_integer()) return v.get<std::int64_t>();
  return std::nullopt;
}

}  // namespace pillbox
