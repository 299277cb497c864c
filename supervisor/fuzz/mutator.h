#pragma once
// Blind, stacked byte-level mutations for `pillbox fuzz` (like AFL's
// "havoc" stage). Deterministic for a given seed, so a session can be
// repeated.
#include <cstddef>
#include <cstdint>
#include <random>
#include <string>
#include <string_view>
#include <vector>

namespace pillbox::fuzz {

class Mutator {
 public:
  // `dictionary`: tokens to insert or overwrite (--dict); `max_len`: no
  // candidate is longer (0 is treated as 1).
  Mutator(std::uint64_t seed, std::vector<std::string> dictionary, std::size_t max_len);

  // One candidate made from `input` by a stack of 1..16 mutations. `other` is
  // another corpus entry for splicing (empty: none). `how`, when given, is
  // set to the operations applied, e.g. "flip-bit,dict-insert". The
  // candidate is never empty nor longer than max_len (a longer `input` is
  // cut first).
  std::string mutate(std::string_view input, std::string_view other, std::string* how = nullptr);

  std::mt19937_64& rng() { return rng_; }

 private:
  std::mt19937_64 rng_;
  std::vector<std::string> dictionary_;
  std::size_t max_len_;
};

}  // namespace pillbox::fuzz
