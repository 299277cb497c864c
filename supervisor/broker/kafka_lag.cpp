#include "supervisor/broker/kafka_lag.h"

#include <algorithm>
#include <set>

namespace pillbox::broker {

std::int64_t kafka_lag(std::int64_t end, std::int64_t committed, std::int64_t low) {
  if (end < 0) return 0;
  const std::int64_t from = committed >= 0 ? committed : low;
  return from < 0 ? 0 : std::max<std::int64_t>(end - from, 0);
}

namespace {

std::string seconds(std::chrono::steady_clock::duration d) {
  return std::to_string(std::chrono::duration_cast<std::chrono::seconds>(d).count()) + " s";
}

std::string figures(const KafkaPartitionLag& p) {
  return "lag " + std::to_string(p.lag) + " records (end " + std::to_string(p.end) + ", committed " +
         std::to_string(p.committed) + "), " + std::to_string(p.held) + " held here, " +
         std::to_string(p.settled_uncommitted) + " settled and not yet committable";
}

}  // namespace

std::vector<std::string> KafkaLagWatch::observe(std::vector<KafkaPartitionLag>& partitions, Clock::time_point now) {
  std::vector<std::string> said;
  std::set<std::int32_t> seen;
  for (KafkaPartitionLag& p : partitions) {
    seen.insert(p.partition);
    if (p.end < 0) {
      // Not fetched yet: its lag is not known, not 0. Taken as the
      // reference, 0 made the backlog a fresh owner finds look like growth.
      const auto known = watched_.find(p.partition);
      p.behind = known != watched_.end() && known->second.behind;
      continue;
    }
    auto [it, fresh] = watched_.try_emplace(p.partition);
    Watched& w = it->second;
    if (fresh || w.committed != p.committed) {
      w.committed = p.committed;
      w.committed_since = now;
    }
    if (fresh || p.lag <= w.low_lag) {
      // Fell back to (or below) where it was: not growing from there.
      w.low_lag = p.lag;
      w.low_since = now;
    }
    const bool held = p.lag > 0 && now - w.committed_since >= behind_after_;
    const bool growing = p.lag > w.low_lag && now - w.low_since >= behind_after_;
    const std::string name = "partition " + std::to_string(p.partition);
    if (held || growing) {
      w.last_held = now;
      std::string why;
      if (held) {
        why = "its commit has waited at offset " + std::to_string(p.committed) + " for " +
              seconds(now - w.committed_since) + (p.held_by.empty() ? "" : " (" + p.held_by + ")");
      } else {
        why = "its lag has stayed above " + std::to_string(w.low_lag) + " records for " + seconds(now - w.low_since) +
              " (records come faster than they settle)";
      }
      if (!w.behind) {
        w.behind = true;
        w.behind_since = now;
        w.last_said = now;
        said.push_back(name + " is behind: " + why + "; " + figures(p));
      } else if (now - w.last_said >= 10 * behind_after_) {
        w.last_said = now;
        said.push_back(name + " is still behind (for " + seconds(now - w.behind_since) + "): " + why + "; " +
                       figures(p));
      }
    } else if (w.behind && (p.lag == 0 || now - w.last_held >= behind_after_)) {
      w.behind = false;
      said.push_back(name + " caught up after " + seconds(now - w.behind_since) + " behind: " + figures(p));
    }
    p.behind = w.behind;
  }
  for (auto it = watched_.begin(); it != watched_.end();) {
    it = seen.count(it->first) > 0 ? std::next(it) : watched_.erase(it);
  }
  return said;
}

}  // namespace pillbox::broker
