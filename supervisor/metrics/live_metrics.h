#pragma once
// What `run --metrics` and `worker --metrics` answer: the process's own
// counters (run_metrics.h) and, when the run has a store, what the store
// holds (store_metrics.h), read on a connection of the metrics server's
// own: a scrape never uses the run's connection, and under WAL its reads
// never block the run's writes.
//
// Reading a large store is not free (store_metrics.h: every task row; about
// 3 s for a million tasks on a loaded 2-core host), and any local client may
// scrape as often as it likes: the store's part of an answer is read again
// only once the last read is older than 4 times what it took, and at least
// 1 s old. So reading the store takes at most a fifth of one core whatever
// the scrapers do; the run's own counters are always fresh.
#include <chrono>
#include <mutex>
#include <optional>
#include <string>

#include "supervisor/metrics/run_metrics.h"
#include "supervisor/store/database.h"
#include "supervisor/store/store.h"

namespace pillbox::metrics {

class LiveMetrics {
 public:
  // `store_dir`: the run's store (resolved), or nullopt (--no-store, a worker).
  explicit LiveMetrics(std::optional<std::string> store_dir);

  RunMetrics& run() { return run_; }

  // The whole answer. With a store it ends with pillbox_store_up: 1 when
  // the store's part could be read (now or by a recent scrape, above), 0
  // when it could not be (not created yet: the run opens it after the
  // server starts; or unreadable, tried again at the next scrape).
  // Thread-safe: scrapes of the store take turns.
  std::string render();

  // Ends a read of the store in progress (sqlite3_interrupt) and reads it
  // no more: called before the server stops (it waits for its threads), so
  // that the end of a run never waits for a long read. Thread-safe.
  void stop();

 private:
  using Clock = std::chrono::steady_clock;
  // The store's part of the answer, read now or reused; "" when unreadable.
  std::string store_part();

  RunMetrics run_;
  std::optional<std::string> store_dir_;
  std::mutex store_mutex_;               // guards what follows
  std::optional<store::Database> db_;    // opened at the first scrape that finds the store
  std::string last_text_;                // the last store part read ("" if none yet)
  Clock::time_point reuse_until_{};      // last_text_ is served until then
  std::mutex reading_mutex_;             // guards what follows; never held during a read
  sqlite3* reading_ = nullptr;           // db_'s connection while a read is in progress
  bool stopped_ = false;
};

}  // namespace pillbox::metrics
