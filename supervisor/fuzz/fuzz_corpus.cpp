#include "supervisor/fuzz/fuzz_corpus.h"

#include <bit>

#include "shared/fingerprint.h"

namespace pillbox::fuzz {
namespace {

// 0 for 0, then 1 + floor(log2(n)): 1 → 1, 2..3 → 2, 4..7 → 3, ...
int magnitude(std::uint64_t n) { return n == 0 ? 0 : static_cast<int>(std::bit_width(n)); }

}  // namespace

std::vector<std::string> behaviour_features(const Outcome& o) {
  const std::string kind(to_string(o.kind));
  std::vector<std::string> f = {"kind:" + kind};
  // A different rejection message is a different path through the parser;
  // numbers and addresses in it are normalized away, or every offset would
  // count as new.
  if (o.kind == Kind::kHandlerError) f.push_back("error:" + normalize_message(o.message));
  if (o.exit_code >= 0) f.push_back("exit:" + std::to_string(o.exit_code));
  f.push_back(kind + "/output:" + std::to_string(magnitude(o.output.size())));
  f.push_back("cpu:" + std::to_string(magnitude(o.cpu_ms)));
  f.push_back("rss:" + std::to_string(magnitude(o.max_rss_kb / 1024)));
  return f;
}

std::string extend_lineage(const std::string& parent, const std::string& step) {
  static const std::string kSeparator = " | ";
  static const std::string kElided = "… | ";
  std::string chain = parent.empty() ? step : parent + kSeparator + step;
  std::size_t steps = 1;
  for (std::size_t at = chain.find(kSeparator); at != std::string::npos; at = chain.find(kSeparator, at + 1)) ++steps;
  if (chain.rfind(kElided, 0) == 0) --steps;  // the marker is not a step
  while (steps > kMaxLineageSteps) {
    const std::size_t from = chain.rfind(kElided, 0) == 0 ? kElided.size() : 0;
    const std::size_t cut = chain.find(kSeparator, from);
    chain = kElided + chain.substr(cut + kSeparator.size());
    --steps;
  }
  return chain;
}

void FuzzCorpus::add_seed(CorpusEntry entry) {
  bytes_ += entry.bytes.size();
  entries_.insert(entries_.begin() + static_cast<std::ptrdiff_t>(seeds_), std::move(entry));
  ++seeds_;
}

void FuzzCorpus::add(CorpusEntry entry, std::mt19937_64& rng) {
  if (entries_.size() < kMaxCorpusEntries && bytes_ + entry.bytes.size() <= kMaxCorpusBytes) {
    bytes_ += entry.bytes.size();
    entries_.push_back(std::move(entry));
    return;
  }
  if (entries_.size() <= seeds_) return;  // only seeds, and they fill it
  std::uniform_int_distribution<std::size_t> victim(seeds_, entries_.size() - 1);
  CorpusEntry& old = entries_[victim(rng)];
  bytes_ = bytes_ - old.bytes.size() + entry.bytes.size();
  old = std::move(entry);
}

bool FuzzCorpus::observe(const std::vector<std::string>& features) {
  bool news = false;
  for (const auto& f : features) {
    const bool error = f.rfind("error:", 0) == 0;
    if (error && error_features_ >= kMaxErrorFeatures) continue;
    if (seen_.insert(f).second) {
      news = true;
      if (error) ++error_features_;
    }
  }
  return news;
}

const CorpusEntry& FuzzCorpus::pick(std::mt19937_64& rng) const {
  // Half the time one of the newest quarter, else any.
  const std::size_t n = entries_.size();
  std::uniform_int_distribution<int> coin(0, 1);
  if (n >= 4 && coin(rng) == 0) {
    std::uniform_int_distribution<std::size_t> newest(n - n / 4, n - 1);
    return entries_[newest(rng)];
  }
  std::uniform_int_distribution<std::size_t> any(0, n - 1);
  return entries_[any(rng)];
}

}  // namespace pillbox::fuzz
