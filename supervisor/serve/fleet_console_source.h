#pragma once
// The console over the fleet's quarantine (pillbox serve --redis URL
// --stream NAME): the dead letters of NAME:dlq (supervisor/broker/
// fleet_quarantine.h) with the pages and API of the store's console, its
// records through FleetQuarantineSource, as `quarantine list/show/stats
// --json --redis` reads them.
// /metrics: pillbox_fleet_up, and store_metrics.h's quarantine families
// counted from the dead letters, on a connection of its own, at most once a
// second (less often when counting takes longer).
#include <chrono>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

#include "shared/status.h"
#include "supervisor/broker/fleet_quarantine.h"
#include "supervisor/broker/fleet_quarantine_source.h"
#include "supervisor/serve/console_source.h"

namespace pillbox::serve {

// How the console treats the dead letters' signatures (broker/fleet_key.h),
// as serve was told: its key (and the --fleet-key argument its jobs are
// given; "" when it came from $PILLBOX_FLEET_KEY, which they inherit), and
// --trust-unsigned.
struct FleetTrust {
  std::optional<broker::FleetKey> key;
  std::string key_arg;
  bool trust_unsigned = false;
};

class FleetSource : public ConsoleSource {
 public:
  // Connects and checks NAME's keys (FleetQuarantine::open): the error says
  // why not (Redis unreachable, a key of another type).
  static Expected<std::unique_ptr<FleetSource>> open(const broker::RedisAddress& address, const std::string& stream,
                                                     FleetTrust trust = {});

  std::string location() const override;
  std::vector<std::string> cli_source_args() const override;
  ApiReply list_tasks(const Query& query) override;
  ApiReply live_runs() override;
  QuarantineCapabilities can() const override { return broker::FleetQuarantine::kCapabilities; }
  Expected<std::string> checked_id(const std::string& text) const override { return broker::parse_fleet_id(text); }
  std::string metrics() override;

 protected:
  // The quarantine, connected again when the last connection broke; nullptr
  // with `error` (503) when Redis cannot be reached.
  QuarantineSource* records(ApiReply& error) override;
  // 503 when Redis cannot be reached or cannot serve now (the connection is
  // dropped, to be made again); else as ConsoleSource's.
  ApiReply failure(const std::string& message, ErrorCode code, int usage_status = 400) override;
  int malformed_id_status() const override { return 400; }
  std::optional<std::string> refused(const store::ListFilter& filter) const override;
  bool attach_payload(QuarantineSource& source, const SourcedRecord& r, PendingDownload& download) override;
  bool trusts_unsigned() const override { return trust_.trust_unsigned; }

 private:
  FleetSource(broker::RedisAddress address, std::string stream, broker::FleetQuarantine fleet, FleetTrust trust);
  // 503: Redis at URL cannot be reached, and why (`detail`).
  ApiReply unreachable(const std::string& detail) const;
  // fleet_ as it is now (a new connection, a new source).
  void use(broker::FleetQuarantine fleet);

  const broker::RedisAddress address_;
  const std::string stream_;
  const FleetTrust trust_;
  std::optional<broker::FleetQuarantine> fleet_;  // under the server's lock
  std::optional<broker::FleetQuarantineSource> records_;  // over fleet_

  std::mutex metrics_lock_;  // what follows: metrics() runs beside the server's lock
  std::string metrics_text_;
  std::chrono::steady_clock::time_point metrics_at_{};  // when the last count ended
  std::chrono::steady_clock::duration metrics_scan_{};   // how long it took
};

}  // namespace pillbox::serve
