#pragma once
// What `run --metrics` and `worker --metrics` answer: the process's own
// counters (run_metrics.h) and, when the run has a store, what the store
// holds (store_metrics.h), read on a connection of the metrics' own: a
// scrape never uses the run's connection, and under WAL its reads never
// block the run's writes.
//
// Reading a large store is not free (store_metrics.h: every task row; 1 to
// 14 s for a million tasks on a loaded 2-core host, warm or cold), and any
// local client may scrape as often as it likes. So:
//   * the store is read on a thread of its own, at a scrape's request, and
//     again only once the last read is older than 4 times what it took (at
//     least 1 s): reading takes at most a fifth of one core whatever the
//     scrapers do;
//   * a scrape waits for the read it asked for at most kStoreWait, then
//     answers with the last one it has (a scrape timeout of Prometheus's
//     default 10 s is never hit); a small store is always read in time, so
//     its numbers are always fresh.
// The run's own counters are always fresh.
#include <sqlite3.h>

#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <mutex>
#include <optional>
#include <string>
#include <thread>

#include "supervisor/metrics/run_metrics.h"
#include "supervisor/store/database.h"

namespace pillbox::metrics {

inline constexpr std::chrono::seconds kStoreWait{3};

class LiveMetrics {
 public:
  // `store_dir`: the run's store (resolved), or nullopt (--no-store, a worker).
  explicit LiveMetrics(std::optional<std::string> store_dir);
  ~LiveMetrics();  // stop()
  LiveMetrics(const LiveMetrics&) = delete;
  LiveMetrics& operator=(const LiveMetrics&) = delete;

  RunMetrics& run() { return run_; }

  // The whole answer. With a store it ends with pillbox_store_up: 1 when
  // the store's part is in it (read for it, or by a recent scrape, above),
  // 0 when it is not (not created yet: the run opens it after the server
  // starts; unreadable, tried again at the next scrape; or not read yet).
  // Thread-safe.
  std::string render();

  // Ends a read of the store in progress (sqlite3_interrupt) and reads it
  // no more; waits for the store's thread. Called before the server stops
  // (which waits for its own threads, maybe in render()), so that the end
  // of a run never waits for a long read. Thread-safe; not from render().
  void stop();

 private:
  using Clock = std::chrono::steady_clock;
  void reader_loop();                 // the store's thread
  std::string read_store();          // on it; "" when unreadable

  RunMetrics run_;
  const std::optional<std::string> store_dir_;

  std::mutex mutex_;                  // guards what follows, never held during a read
  std::condition_variable changed_;   // a read asked for, a read done, stopped
  bool wanted_ = false;               // a scrape asked for a fresh read
  bool stopped_ = false;
  std::uint64_t reads_done_ = 0;
  std::string last_text_;             // the store part of the last read ("" if it failed, or none yet)
  Clock::time_point reuse_until_{};   // last_text_ is served until then
  sqlite3* reading_ = nullptr;        // db_'s connection while a read is in progress
  std::thread reader_;                // started by the first scrape

  std::optional<store::Database> db_;  // the store's thread's own
};

}  // namespace pillbox::metrics
