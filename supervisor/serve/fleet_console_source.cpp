#include "supervisor/serve/fleet_console_source.h"

#include <algorithm>
#include <set>

#include "shared/failure_kind.h"
#include "supervisor/metrics/metrics_text.h"
#include "supervisor/metrics/store_metrics.h"

namespace pillbox::serve {
namespace {

// A scrape is answered from the last count while it is younger than this,
// or than kScanTimes its scan's duration (timed from the scan's end):
// counting reads every dead letter, and anyone who reaches /metrics may ask
// as often as they like.
constexpr std::chrono::seconds kMetricsFresh{1};
constexpr int kScanTimes = 4;

}  // namespace

void FleetSource::use(broker::FleetDeadLetters& dead_letters) {
  dead_letters.use_key(trust_.key);
  records_.emplace(dead_letters);
}

void FleetSource::drop() {
  records_.reset();
  disconnect();
}

std::vector<std::string> FleetSource::cli_source_args() const {
  std::vector<std::string> args = names_.cli_args;
  if (!trust_.key_arg.empty()) args.insert(args.end(), {"--fleet-key", trust_.key_arg});
  if (trust_.trust_unsigned) args.push_back("--trust-unsigned");
  return args;
}

ApiReply FleetSource::unreachable(const std::string& detail) const {
  // The connection's errors name the server too: said once.
  const std::string where = names_.broker + " at " + names_.at;
  std::string why = detail;
  for (const std::string& prefix : {"cannot reach " + where + ": ", where + ": "}) {
    if (why.rfind(prefix, 0) == 0) {
      why = why.substr(prefix.size());
      break;
    }
  }
  return error_reply(503, where + " cannot be reached: " + why + "; the console answers again once it is back");
}

QuarantineSource* FleetSource::records(ApiReply& error) {
  if (records_ && answers()) return &*records_;
  drop();
  broker::FleetDeadLetters* dead_letters = connect(error);
  if (dead_letters == nullptr) return nullptr;
  use(*dead_letters);
  return &*records_;
}

ApiReply FleetSource::failure(const std::string& message, ErrorCode code, int usage_status) {
  if (records_) {
    const Link now = link();
    if (now != Link::kUp) {
      if (now == Link::kBroken) drop();  // connected again by the next request
      return unreachable(message);
    }
  }
  return ConsoleSource::failure(message, code, usage_status);
}

std::optional<std::string> FleetSource::refused(const store::ListFilter& filter) const {
  if (!filter.source) return std::nullopt;
  return "source does not apply here: every record of the fleet comes from a worker";
}

ApiReply FleetSource::list_tasks(const Query&) {
  return error_reply(404, "the fleet's quarantine has no tasks here: pillbox worker keeps no ledger; each worker's "
                          "counts are at its --metrics address (pillbox worker --metrics HOST:PORT)");
}

ApiReply FleetSource::live_runs() {
  return error_reply(404, "no run is attached to the fleet's quarantine: the workers of " + names_.workers +
                              " show what they run at their --metrics address (pillbox worker --metrics HOST:PORT)");
}

bool FleetSource::attach_payload(QuarantineSource& source, const SourcedRecord& r, PendingDownload& download) {
  auto bytes = source.payload(r);
  if (!bytes) {
    download.error = error_reply(409, bytes.error());
    return false;
  }
  download.bytes = std::move(bytes->bytes);
  return true;
}

std::string FleetSource::metrics() {
  std::lock_guard<std::mutex> hold(metrics_lock_);
  const auto start = std::chrono::steady_clock::now();
  if (!metrics_text_.empty() && start - metrics_at_ < std::max<std::chrono::steady_clock::duration>(
                                                          kMetricsFresh, kScanTimes * metrics_scan_)) {
    return metrics_text_;
  }
  // A connection of its own: the pages' one is the server's lock's.
  metrics::RecordCounts records;
  std::set<std::string> fingerprints;
  bool up = false;
  if (auto q = open_apart()) {
    up = (*q)->each([&](const broker::FleetRecord& r) {
           // Anyone who can write to the broker writes kinds: an unknown
           // one is "other", never a new label series per forged value.
           const std::string& kind = r.record.entry.kind;
           ++records[{std::string(store::to_string(r.record.status)), kind_from_string(kind) ? kind : "other"}];
           fingerprints.insert(r.record.entry.fingerprint);
           return true;
         }).is_ok();
  }
  metrics::MetricsText text;
  text.family("pillbox_fleet_up",
              "1 when this answer has the fleet's quarantine in it, 0 when " + names_.broker + " cannot be read.",
              metrics::MetricType::kGauge);
  text.sample("pillbox_fleet_up", {}, up ? 1 : 0);
  if (up) metrics::write_quarantine_families(text, records, static_cast<std::int64_t>(fingerprints.size()));
  metrics_text_ = text.text();
  metrics_at_ = std::chrono::steady_clock::now();
  metrics_scan_ = metrics_at_ - start;
  return metrics_text_;
}

}  // namespace pillbox::serve
