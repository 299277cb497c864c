#pragma once
// Byte-level mutations for `pillbox fuzz`: the fuzz loop cannot instrument the
// handlers and exec commands it runs, so candidates come from blind, stacked
// mutations of corpus entries (AFL's "havoc" stage, libFuzzer's mutators).
// Deterministic for a given seed, so a fuzz session can be repeated.
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
  // another corpus entry for splicing (empty: no splice). `how`, when given,
  // receives the operations applied, for example "flip-bit,dict-insert"
  // (replacing its contents). The operations: flip-bit, flip-byte,
  // random-byte, interesting-8/16/32, arith-8/16/32, delete-block,
  // duplicate-block, insert-repeated, insert-random, overwrite-copy,
  // splice-cut, splice-insert, dict-insert, dict-overwrite.
  // The candidate is never empty and never longer than max_len; an `input`
  // longer than max_len is cut to it first. An empty `input` is fine (only
  // insertions apply to it).
  std::string mutate(std::string_view input, std::string_view other, std::string* how = nullptr);

  std::mt19937_64& rng() { return rng_; }

 private:
  std::mt19937_64 rng_;
  std::vector<std::string> dictionary_;
  std::size_t max_len_;
};

}  // namespace pillbox::fuzz
