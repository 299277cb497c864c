#pragma once
// The console over a store (pillbox serve --store DIR): its records as a
// StoreQuarantineSource, its tasks and runs by console_api.h's
// functions, and /metrics from its gauges, read on a thread and connection
// of their own (store_metrics_reader.h), never under the server's lock.
// While the store's file is removed or replaced (store_presence.h),
// unavailable() says so and /metrics says pillbox_store_up 0.
#include <memory>
#include <string>
#include <vector>

#include "supervisor/ops/store_quarantine_source.h"
#include "supervisor/serve/console_source.h"
#include "supervisor/serve/store_presence.h"

namespace pillbox::metrics {
class StoreMetricsReader;
}

namespace pillbox::serve {

class StoreSource : public ConsoleSource {
 public:
  // `store` stays open for as long as this source is used.
  explicit StoreSource(ConsoleStore store);
  ~StoreSource() override;

  std::string location() const override { return store_.dir; }
  std::vector<std::string> cli_source_args() const override { return {"--store", store_.dir}; }
  ApiReply list_tasks(const Query& query) override { return serve::list_tasks(store_, query); }
  ApiReply live_runs() override { return serve::live_runs(store_); }
  QuarantineCapabilities can() const override { return StoreQuarantineSource::kCapabilities; }
  std::optional<std::string> unavailable() const override { return presence_.problem(); }
  Expected<std::string> checked_id(const std::string& text) const override {
    auto id = record_id(text);
    if (!id) return Error{id.error(), ErrorCode::kUsage};
    return std::to_string(*id);
  }
  std::string metrics() override;

 protected:
  QuarantineSource* records(ApiReply&) override { return &records_; }
  int malformed_id_status() const override { return 404; }  // no record has it
  bool attach_payload(QuarantineSource& source, const SourcedRecord& r, PendingDownload& download) override;

 private:
  ConsoleStore store_;
  StoreQuarantineSource records_;
  StorePresence presence_;
  std::unique_ptr<metrics::StoreMetricsReader> metrics_;
};

}  // namespace pillbox::serve
