#pragma once
// "Did you mean ...?": the candidate nearest a mistyped word (a command,
// a verb, an option), when it is within a typo's reach of it.
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace pillbox {

// The candidate at the smallest edit distance from `word`, if that distance
// is at most 1 for words of up to 3 characters and 2 for longer ones (also a
// swap of two neighbours counts as one); nullopt when none is that close.
std::optional<std::string> nearest_word(std::string_view word, const std::vector<std::string>& candidates);

}  // namespace pillbox
