#pragma once
// The value of a closed enum whose word is `text`, or nullopt: the inverse of
// its to_string (found by argument-dependent lookup), over the list of all
// its values (kAllKinds, kAllTaskStates, ...). One loop for every closed set
// whose text crosses SQL, JSON or the command line.
#include <cstddef>
#include <optional>
#include <string_view>

namespace pillbox {

template <class Enum, std::size_t N>
std::optional<Enum> enum_from_text(const Enum (&all)[N], std::string_view text) {
  for (Enum e : all) {
    if (to_string(e) == text) return e;
  }
  return std::nullopt;
}

}  // namespace pillbox
