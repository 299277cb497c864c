#include "supervisor/metrics/live_metrics.h"

namespace pillbox::metrics {

LiveMetrics::LiveMetrics(const std::optional<std::string>& store_dir) {
  if (store_dir) store_ = std::make_unique<StoreMetricsReader>(*store_dir);
}

std::string LiveMetrics::render() {
  MetricsText text;
  run_.render(text);
  if (!store_) return text.text();
  const std::string store = store_->text();
  text.family("pillbox_store_up", "1 when this answer has the run's store in it, 0 when it has not.",
              MetricType::kGauge);
  text.sample("pillbox_store_up", {}, store.empty() ? 0 : 1);
  return text.text() + store;
}

void LiveMetrics::stop() {
  if (store_) store_->stop();
}

}  // namespace pillbox::metrics
