#pragma once
// A store's gauges (store_metrics.h) for an endpoint any local client may
// scrape as often as it likes: read on a thread and connection of its own,
// at most so often, waited for a bounded time. Used by `run --metrics` and
// `serve`'s /metrics.
//
// Reading a large store is not free (1 to 14 s for a million tasks on a
// loaded 2-core host). So:
//   * a scrape triggers a read only once the last one is older than 4 times
//     what it took (at least 1 s): at most a fifth of one core;
//   * a scrape waits at most kStoreWait for its read, then gets the last
//     one (Prometheus's default 10 s timeout is never hit); a small store is
//     always read in time.
#include <sqlite3.h>

#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <mutex>
#include <optional>
#include <string>
#include <thread>

#include "supervisor/store/database.h"

namespace pillbox::metrics {

inline constexpr std::chrono::seconds kStoreWait{3};

class StoreMetricsReader {
 public:
  // `store_dir`: a resolved store directory. Nothing is opened yet: the
  // store may not exist yet (a run creates it after its server starts).
  explicit StoreMetricsReader(std::string store_dir);
  ~StoreMetricsReader();  // stop()
  StoreMetricsReader(const StoreMetricsReader&) = delete;
  StoreMetricsReader& operator=(const StoreMetricsReader&) = delete;

  // The store's families in the exposition format (store_metrics.h), read
  // for this call or by a recent one; "" when there are none: the store
  // does not exist yet, cannot be read (tried again at the next call), has
  // not been read yet, or stop() was called. Thread-safe.
  std::string text();

  // Ends a read in progress (sqlite3_interrupt), reads no more, and waits
  // for the reading thread: an HTTP server's end need not wait for a long
  // read. Thread-safe; not from inside text().
  void stop();

 private:
  using Clock = std::chrono::steady_clock;
  void reader_loop();  // the reading thread
  std::string read();  // on it; "" when unreadable

  const std::string store_dir_;

  std::mutex mutex_;                  // guards what follows, never held during a read
  std::condition_variable changed_;   // a read asked for, a read done, stopped
  bool wanted_ = false;               // text() asked for a fresh read
  bool stopped_ = false;
  std::uint64_t reads_done_ = 0;
  std::string last_text_;             // what the last read gave ("" if it failed, or none yet)
  Clock::time_point reuse_until_{};   // last_text_ is served until then
  sqlite3* reading_ = nullptr;        // db_'s connection while a read is in progress
  std::thread reader_;                // started by the first text()

  std::optional<store::Database> db_;  // the reading thread's own
};

}  // namespace pillbox::metrics
