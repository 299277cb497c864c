#include "supervisor/metrics/store_metrics_reader.h"

#include <sys/stat.h>

#include <algorithm>
#include <utility>

#include "supervisor/metrics/store_metrics.h"

namespace pillbox::metrics {

StoreMetricsReader::StoreMetricsReader(std::string store_dir) : store_dir_(std::move(store_dir)) {}

StoreMetricsReader::~StoreMetricsReader() { stop(); }

std::string StoreMetricsReader::text() {
  std::unique_lock lock(mutex_);
  if (stopped_) return "";
  if (last_text_.empty() || Clock::now() >= reuse_until_) {
    if (!reader_.joinable()) reader_ = std::thread([this] { reader_loop(); });
    wanted_ = true;
    changed_.notify_all();
    // A read in progress, if any, began at most one read ago: it will do.
    const std::uint64_t target = reads_done_ + 1;
    changed_.wait_for(lock, kStoreWait, [&] { return reads_done_ >= target || stopped_; });
  }
  return stopped_ ? "" : last_text_;
}

void StoreMetricsReader::stop() {
  {
    std::lock_guard lock(mutex_);
    stopped_ = true;
    if (reading_ != nullptr) ::sqlite3_interrupt(reading_);
    changed_.notify_all();
  }
  // No text() starts the thread once stopped_ is set (under the lock).
  if (reader_.joinable()) reader_.join();
}

void StoreMetricsReader::reader_loop() {
  std::unique_lock lock(mutex_);
  while (true) {
    changed_.wait(lock, [&] { return wanted_ || stopped_; });
    if (stopped_) return;
    wanted_ = false;
    const auto started = Clock::now();
    lock.unlock();
    std::string text = read();
    lock.lock();
    const auto ended = Clock::now();
    last_text_ = std::move(text);
    // A failed read is tried again at the next scrape (failing is cheap: no
    // file, no tables yet).
    reuse_until_ = last_text_.empty()
                       ? ended
                       : ended + std::max<Clock::duration>(std::chrono::seconds(1), 4 * (ended - started));
    ++reads_done_;
    changed_.notify_all();
  }
}

std::string StoreMetricsReader::read() {
  const std::string path = store_dir_ + "/pillbox.db";
  struct stat st {};
  // Database::open would create a missing file; a run creates and migrates
  // it (store.h), this only reads what the run made.
  if (!db_ && ::stat(path.c_str(), &st) == 0) {
    if (auto db = store::Database::open(path)) db_.emplace(std::move(*db));
  }
  if (!db_) return "";
  {
    std::lock_guard lock(mutex_);
    if (stopped_) return "";
    reading_ = db_->handle();
  }
  MetricsText text;
  const Status read = write_store_metrics(*db_, text);
  {
    // Cleared before db_ may close: stop() never interrupts a closed connection.
    std::lock_guard lock(mutex_);
    reading_ = nullptr;
  }
  if (!read) {
    db_.reset();  // opened afresh next time (e.g. a store not yet migrated)
    return "";
  }
  return text.text();
}

}  // namespace pillbox::metrics
