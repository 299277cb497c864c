#include "supervisor/io/nearest_word.h"

#include <algorithm>

namespace pillbox {
namespace {

// Words longer than this are not typos of a command line's names; the
// distance table stays small whatever a caller passes.
constexpr std::size_t kMaxWordLength = 64;

// Levenshtein distance with adjacent transpositions (optimal string alignment).
std::size_t edit_distance(std::string_view a, std::string_view b) {
  std::vector<std::vector<std::size_t>> d(a.size() + 1, std::vector<std::size_t>(b.size() + 1));
  for (std::size_t i = 0; i <= a.size(); ++i) d[i][0] = i;
  for (std::size_t j = 0; j <= b.size(); ++j) d[0][j] = j;
  for (std::size_t i = 1; i <= a.size(); ++i) {
    for (std::size_t j = 1; j <= b.size(); ++j) {
      const std::size_t cost = a[i - 1] == b[j - 1] ? 0 : 1;
      d[i][j] = std::min({d[i - 1][j] + 1, d[i][j - 1] + 1, d[i - 1][j - 1] + cost});
      if (i > 1 && j > 1 && a[i - 1] == b[j - 2] && a[i - 2] == b[j - 1]) d[i][j] = std::min(d[i][j], d[i - 2][j - 2] + 1);
    }
  }
  return d[a.size()][b.size()];
}

}  // namespace

std::optional<std::string> nearest_word(std::string_view word, const std::vector<std::string>& candidates) {
  if (word.empty() || word.size() > kMaxWordLength) return std::nullopt;
  const std::size_t reach = word.size() <= 3 ? 1 : 2;
  std::optional<std::string> best;
  std::size_t best_distance = reach + 1;
  for (const auto& candidate : candidates) {
    if (candidate.size() > kMaxWordLength || candidate == word) continue;
    const std::size_t distance = edit_distance(word, candidate);
    if (distance < best_distance) {
      best_distance = distance;
      best = candidate;
    }
  }
  return best;
}

}  // namespace pillbox
