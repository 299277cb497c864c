#include "supervisor/metrics/live_metrics.h"

#include <sys/stat.h>

#include <algorithm>
#include <utility>

#include "supervisor/metrics/store_metrics.h"

namespace pillbox::metrics {

LiveMetrics::LiveMetrics(std::optional<std::string> store_dir) : store_dir_(std::move(store_dir)) {}

std::string LiveMetrics::render() {
  MetricsText text;
  run_.render(text);
  if (!store_dir_) return text.text();
  const std::string store = store_part();
  text.family("pillbox_store_up", "1 when this answer could read the run's store, 0 when it could not.",
              MetricType::kGauge);
  text.sample("pillbox_store_up", {}, store.empty() ? 0 : 1);
  return text.text() + store;
}

void LiveMetrics::stop() {
  std::lock_guard reading(reading_mutex_);
  stopped_ = true;
  if (reading_ != nullptr) ::sqlite3_interrupt(reading_);
}

std::string LiveMetrics::store_part() {
  std::lock_guard lock(store_mutex_);
  {
    std::lock_guard reading(reading_mutex_);
    if (stopped_) return "";
  }
  const auto started = Clock::now();
  if (!last_text_.empty() && started < reuse_until_) return last_text_;
  const std::string path = *store_dir_ + "/pillbox.db";
  struct stat st {};
  // Database::open would create a missing file; the run creates and
  // migrates it (store.h), this only reads what the run made.
  if (!db_ && ::stat(path.c_str(), &st) == 0) {
    if (auto db = store::Database::open(path)) db_.emplace(std::move(*db));
  }
  if (!db_) return "";
  {
    std::lock_guard reading(reading_mutex_);
    if (stopped_) return "";
    reading_ = db_->handle();
  }
  MetricsText text;
  const Status read = write_store_metrics(*db_, text);
  {
    // Cleared before db_ may close: stop() never interrupts a closed connection.
    std::lock_guard reading(reading_mutex_);
    reading_ = nullptr;
  }
  if (!read) {
    db_.reset();  // opened afresh next time (e.g. a store not yet migrated)
    last_text_.clear();
    return "";
  }
  const auto ended = Clock::now();
  reuse_until_ = ended + std::max<Clock::duration>(std::chrono::seconds(1), 4 * (ended - started));
  last_text_ = text.text();
  return last_text_;
}

}  // namespace pillbox::metrics
