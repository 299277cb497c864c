#pragma once
// Points in time on the command line (`--since`): an age ("24h", "30d":
// that long ago) or a UTC date ("2026-11-30", "2026-11-30T12:00:00Z").
#include <cstdint>
#include <string>

#include "shared/status.h"

namespace pillbox {

// Milliseconds since the Unix epoch. `now_ms` anchors ages.
Expected<std::int64_t> parse_since(const std::string& text, const std::string& option, std::int64_t now_ms);

}  // namespace pillbox
