#pragma once
// Standard base64 (RFC 4648, with padding) for payload_b64 / output_b64.
#include <optional>
#include <string>
#include <string_view>

namespace pillbox {

std::string base64_encode(std::string_view data);
// nullopt on any character outside the alphabet or bad padding; whitespace is not allowed.
std::optional<std::string> base64_decode(std::string_view text);

// True when `data` is valid UTF-8 (no overlongs, no surrogates, <= U+10FFFF).
bool is_valid_utf8(std::string_view data);

}  // namespace pillbox
