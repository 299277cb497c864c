#pragma once
// The corpus of `pillbox fuzz`: the inputs mutations start from, and the
// behaviour seen so far. The targets are not instrumented (a handler, an exec
// command), so "new coverage" is judged from what a run shows from outside:
// the outcome kind, a clean rejection's message, and the size of the output,
// the CPU time and the memory, each in powers of two (like AFL's hit-count
// buckets). An input that shows something new is kept; one that takes twice
// the CPU of anything before is kept, which is what walks a backtracking
// regex or a quadratic parser towards its blow-up.
#include <cstddef>
#include <cstdint>
#include <random>
#include <set>
#include <string>
#include <vector>

#include "supervisor/outcome.h"

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

class FuzzCorpus {
 public:
  void add(CorpusEntry entry) { entries_.push_back(std::move(entry)); }
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
  std::set<std::string> seen_;
};

}  // namespace pillbox::fuzz
