#pragma once
// A Kafka worker's lag, per partition it is assigned, and when it says a
// partition is behind (docs/distributed.md, Kafka: lag). Pure: the back end
// (kafka_back_end.h) samples, /metrics shows the samples (run_metrics.h),
// and KafkaLagWatch turns them into the worker's notices.
//
// Lag here is the partition's end (its high watermark, as librdkafka's
// fetcher last saw it: no request is made for it) minus the offset the
// worker commits: what the group has not yet got past. Records settled
// behind an unsettled one count in it: the group would read them again.
//
// "Behind" (--behind-after D), either of:
//   held:    lag > 0 and the committed offset has not moved for D (a record
//            waits for its retry, runs long, or nothing is settled at all);
//   growing: the lag has stayed above where it was D ago the whole time
//            (never fell back to it): records come faster than they settle.
// A worker that keeps up sees its lag fall back often, and its commit
// move as records settle: neither holds. It is said once, when it
// starts, again every 10 x D while it lasts (never a line per record), and
// its end ("caught up") when the lag is 0 or neither rule has held for D.
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <map>
#include <string>
#include <vector>

namespace pillbox::broker {

struct KafkaPartitionLag {
  std::int32_t partition = 0;
  std::int64_t end = -1;             // the high watermark (-1: not fetched yet)
  std::int64_t committed = -1;       // the offset the worker commits now (-1: nothing read nor committed)
  std::int64_t lag = 0;              // end - committed, 0 while either is unknown
  std::size_t held = 0;              // read and not settled: buffered, queued, running, waiting for a retry
  std::size_t settled_uncommitted = 0;  // settled behind one that is not: the commit cannot pass them yet
  bool behind = false;               // as KafkaLagWatch says
  // What sits at the committed offset ("record 3@120 waits for its retry"),
  // for the notice; "" when nothing does.
  std::string held_by;
};

// end - committed, where both are known (committed < 0: from the partition's
// start, `low`).
std::int64_t kafka_lag(std::int64_t end, std::int64_t committed, std::int64_t low);

class KafkaLagWatch {
 public:
  using Clock = std::chrono::steady_clock;
  explicit KafkaLagWatch(std::chrono::milliseconds behind_after) : behind_after_(behind_after) {}

  // One sample of every assigned partition (one missing is no longer
  // assigned: forgotten, nothing said; one whose end is not known yet
  // counts for nothing). Sets each one's `behind`; returns the lines to
  // say now.
  std::vector<std::string> observe(std::vector<KafkaPartitionLag>& partitions, Clock::time_point now);

 private:
  struct Watched {
    std::int64_t committed = -2;           // as last seen
    Clock::time_point committed_since{};   // ... unchanged since
    std::int64_t low_lag = 0;              // the growing rule's reference
    Clock::time_point low_since{};
    bool behind = false;
    Clock::time_point behind_since{};
    Clock::time_point last_held{};         // a rule held last at
    Clock::time_point last_said{};
  };
  std::chrono::milliseconds behind_after_;
  std::map<std::int32_t, Watched> watched_;
};

}  // namespace pillbox::broker
