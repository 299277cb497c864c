#pragma once
// The live counters of one `pillbox run` or `pillbox worker` (`--metrics`).
// The dispatcher's thread counts (metered_run.h); the metrics server's
// thread renders (live_metrics.h).
//
// Thread-safe. One mutex, held for a few increments or one copy and never
// across a system call, so a scrape never holds up the run for longer than
// a copy of the counters.
#include <cstddef>
#include <cstdint>
#include <map>
#include <mutex>
#include <string>
#include <utility>
#include <vector>

#include "shared/failure_kind.h"
#include "supervisor/broker/kafka_lag.h"
#include "supervisor/metrics/metrics_text.h"

namespace pillbox::metrics {

// Upper bounds of the attempt duration histogram, in seconds: from a fast
// handler's few milliseconds to the longest wall limits.
inline const std::vector<double> kAttemptSecondsBounds = {0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5,
                                                           1,     2.5,  5,     10,   30,  60,  300};

class RunMetrics {
 public:
  RunMetrics();

  // --jobs: the slots the run has.
  void set_slots(std::size_t slots);
  // An attempt went to a slot (the dispatcher took a task).
  void attempt_started();
  // An attempt ended as `kind` after `wall_ms` of the child's wall time.
  void attempt_ended(Kind kind, std::uint64_t wall_ms);
  // A task that was no attempt ended (a copy run for the breaker's answer):
  // its slot is free, nothing else counted.
  void slot_freed();
  // A task's verdict: `verdict` is the word the run prints for it (ok,
  // quarantined, poison, gave-up, held; a worker's ok, dead-lettered,
  // released, taken-over); `new_fingerprint`: its failure's fingerprint was
  // new to the store.
  void verdict(Kind kind, const std::string& verdict, bool new_fingerprint);
  // An earlier poison verdict was taken back (a suspected outage explains it).
  void taken_back();
  void input_error();
  void set_breaker_open(bool open);
  // A Kafka worker's assigned partitions of `topic` as last sampled
  // (kafka_lag.h): their families are in the answer from the first call on.
  void set_kafka_partitions(const std::string& topic, const std::vector<broker::KafkaPartitionLag>& partitions);

  // The families, in a fixed order, from one consistent copy of the counters.
  void render(MetricsText& out) const;

  struct Counters {
    std::size_t slots = 0;
    std::size_t busy = 0;
    bool breaker_open = false;
    // Keyed by the enum, not its text: after a key's first use, counting allocates nothing.
    std::map<std::pair<Kind, std::string>, std::uint64_t> tasks;  // (kind, verdict)
    std::map<Kind, std::uint64_t> attempts;
    Histogram attempt_seconds{kAttemptSecondsBounds};
    std::uint64_t new_fingerprints = 0;
    std::uint64_t taken_back = 0;
    std::uint64_t input_errors = 0;
    bool kafka = false;  // a Kafka worker: its partitions' families are shown
    std::string kafka_topic;
    std::vector<broker::KafkaPartitionLag> kafka_partitions;
  };
  // One consistent copy of the counters (the live file's, live_run_file.h).
  Counters snapshot() const;

 private:
  static void render_kafka(const Counters& c, MetricsText& out);
  mutable std::mutex mutex_;
  Counters counters_;
};

}  // namespace pillbox::metrics
