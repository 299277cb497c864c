#pragma once
// The corpus of `pillbox fuzz` and the behaviour seen so far. Targets are
// not instrumented, so "new coverage" is what a run shows from outside, in
// power-of-two buckets; twice the CPU of anything before counts as new,
// which walks a backtracking regex towards its blow-up. See
// docs/fuzzing.md, The corpus: behaviour seen from outside.
#include <cstddef>
#include <cstdint>
#include <random>
#include <set>
#include <string>
#include <vector>

#include "supervisor/classify/outcome.h"

namespace pillbox::fuzz {

struct CorpusEntry {
  std::string bytes;
  std::string seed;          // the seed it descends from ("file x", "quarantine record 7")
  std::string seed_sha256;
  std::uint32_t generation = 0;  // 0: the seed itself
  std::string lineage;       // the mutations of each generation since the seed, " | " between them
};

// `parent`'s lineage with one more generation's mutations: the newest
// kMaxLineageSteps steps, "… | " before them when older ones were dropped.
inline constexpr std::size_t kMaxLineageSteps = 8;
std::string extend_lineage(const std::string& parent, const std::string& step);

// The behaviour features of one outcome (strings like "cpu:5").
std::vector<std::string> behaviour_features(const Outcome& outcome);

// Bounds of the corpus in a session of any length: entries and bytes (seeds
// count too). When full, a new input replaces a random non-seed one.
inline constexpr std::size_t kMaxCorpusEntries = 10'000;
inline constexpr std::size_t kMaxCorpusBytes = std::size_t{256} << 20;
// Distinct rejection messages that count as behaviour: a parser that echoes
// its input in its errors would otherwise make every run "new".
inline constexpr std::size_t kMaxErrorFeatures = 512;

class FuzzCorpus {
 public:
  // Seeds are always kept.
  void add_seed(CorpusEntry entry);
  void add(CorpusEntry entry, std::mt19937_64& rng);
  // Marks `features` seen; true when at least one was new.
  bool observe(const std::vector<std::string>& features);
  // A parent for the next candidate: newer entries (which showed something
  // new most recently) a little more often than old ones.
  const CorpusEntry& pick(std::mt19937_64& rng) const;
  std::size_t size() const { return entries_.size(); }
  bool empty() const { return entries_.empty(); }
  std::size_t features() const { return seen_.size(); }

 private:
  std::vector<CorpusEntry> entries_;
  std::size_t seeds_ = 0;
  std::size_t bytes_ = 0;
  std::size_t error_features_ = 0;
  std::set<std::string> seen_;
};

}  // namespace pillbox::fuzz
