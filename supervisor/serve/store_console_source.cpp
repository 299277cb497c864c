#include "supervisor/serve/store_console_source.h"

#include "supervisor/metrics/metrics_text.h"
#include "supervisor/metrics/store_metrics_reader.h"

namespace pillbox::serve {

StoreSource::StoreSource(ConsoleStore store)
    : store_(std::move(store)),
      records_(store_.quarantine, store_.db, store_.dir),
      presence_(store_.dir),
      metrics_(std::make_unique<metrics::StoreMetricsReader>(store_.dir)) {}

StoreSource::~StoreSource() = default;

bool StoreSource::attach_payload(QuarantineSource&, const SourcedRecord& r, PendingDownload& download) {
  auto payload = store_.quarantine.payloads().find(r.record.entry.payload_sha256);
  if (!payload) {
    download.error = error_reply(500, payload.error());
    return false;
  }
  download.payload = std::move(*payload);
  return true;
}

std::string StoreSource::metrics() {
  const std::string store = presence_.problem() ? std::string() : metrics_->text();
  metrics::MetricsText text;
  text.family("pillbox_store_up", "1 when this answer has the store in it, 0 when it cannot be read.",
              metrics::MetricType::kGauge);
  text.sample("pillbox_store_up", {}, store.empty() ? 0 : 1);
  return text.text() + store;
}

}  // namespace pillbox::serve
