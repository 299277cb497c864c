#pragma once
// What `run --metrics` and `worker --metrics` answer: the process's own
// counters (run_metrics.h) and, with a store, the store's gauges
// (store_metrics_reader.h).
#include <memory>
#include <optional>
#include <string>

#include "supervisor/metrics/run_metrics.h"
#include "supervisor/metrics/store_metrics_reader.h"

namespace pillbox::metrics {

class LiveMetrics {
 public:
  // `store_dir`: the run's store (resolved), or nullopt (--no-store, a worker).
  explicit LiveMetrics(const std::optional<std::string>& store_dir);

  RunMetrics& run() { return run_; }

  // The whole answer. With a store it includes pillbox_store_up: 0 when the
  // store's families are missing (not created yet: the run opens it after
  // the server starts; unreadable; not read yet; stopped). Thread-safe.
  std::string render();

  // The store is read no more, a read in progress is cut short
  // (StoreMetricsReader::stop). Thread-safe; not from inside render().
  void stop();

 private:
  RunMetrics run_;
  std::unique_ptr<StoreMetricsReader> store_;  // null without a store
};

}  // namespace pillbox::metrics
