#pragma once
// Fuzzing dictionaries in the format AFL (-x) and libFuzzer (-dict=) share
// (`pillbox fuzz --dict`): one token per line, `name="value"` or `"value"`,
// `#` comments, blank lines; in values `\\`, `\"` and `\xNN` escapes. AFL's
// `name@level="value"` is read (the level ignored).
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "shared/status.h"

namespace pillbox::fuzz {

// The tokens in file order, duplicates dropped. Errors are one line:
// "ORIGIN:LINE: what is wrong" (a bad escape, a raw control byte or '"' in a
// value, an empty value "", a line that is not an entry), or "ORIGIN: no
// entries" when there is no token at all. CRLF line endings are accepted.
Expected<std::vector<std::string>> parse_dictionary(std::string_view text, std::string_view origin);
// Reads and parses a file; a missing or unreadable file, one that is not a
// regular file (a FIFO would block) or one over kMaxDictionaryBytes is an
// error naming it.
inline constexpr std::uint64_t kMaxDictionaryBytes = 64ull << 20;
Expected<std::vector<std::string>> load_dictionary(const std::string& path);

}  // namespace pillbox::fuzz
