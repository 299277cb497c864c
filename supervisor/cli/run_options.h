#pragma once
// The options of `pillbox run` about what surrounds each task: the store it
// resumes from and quarantines into, retries, outage detection (the circuit
// breaker) and the quarantine hooks. What runs is child_options.h's, where
// results go path_options.h's. One reader per section, each checking its
// options into the job in the order `run` has always checked them.
#include <chrono>
#include <memory>
#include <string>
#include <vector>

#include "shared/status.h"
#include "supervisor/cli/args.h"
#include "supervisor/cli/run_job.h"
#include "supervisor/flow/alert_hook.h"
#include "supervisor/metrics/live_metrics.h"
#include "supervisor/metrics/metrics_server.h"

namespace pillbox::cli {

// store, no-store, rerun, rerun-outdated, keep-results.
extern const std::vector<OptionSpec> kStoreOptions;
// max-attempts, backoff-base, backoff-max, retry-exit-code.
extern const std::vector<OptionSpec> kRetryOptions;
// no-breaker, breaker-window, breaker-threshold, breaker-probe-interval, breaker-max-wait.
extern const std::vector<OptionSpec> kBreakerOptions;
// quarantine-limit, hook-timeout, on-quarantine, on-new-fingerprint.
extern const std::vector<OptionSpec> kQuarantineOptions;
// metrics (run and worker).
extern const std::vector<OptionSpec> kMetricsOptions;

// --store DIR (resolved: given, $PILLBOX_STORE, ...) or --no-store, --rerun,
// and --rerun-outdated and --keep-results SIZE (a store only).
Status read_store_options(const Args& args, JobSettings& job);

// --max-attempts, the backoff and --retry-exit-code, which is for exec
// commands only: job.run.config must be read first.
Status read_retry_options(const Args& args, JobSettings& job);

// --no-breaker and the breaker's window, threshold, probe interval and
// longest wait.
Status read_breaker_options(const Args& args, BreakerSettings& breaker);

// The hooks of --on-quarantine (every new record) and --on-new-fingerprint
// (records of fingerprints the store never saw), either or both.
class QuarantineHooks {
 public:
  // Queues a record's JSON for the hooks it is for; never waits.
  void fire(const std::string& record_json, bool new_fingerprint);
  // Gives running hooks --hook-timeout to finish, then what went wrong with
  // any of them, one line each, for the run's warnings.
  std::vector<std::string> finish();

 private:
  friend Status read_quarantine_options(const Args&, JobSettings&, QuarantineHooks&);
  std::chrono::milliseconds timeout_{10'000};
  std::unique_ptr<AlertHook> every_record_;
  std::unique_ptr<AlertHook> new_fingerprints_;
};

// --quarantine-limit into `job`, and the hooks with their --hook-timeout,
// which need a store: read_store_options first.
Status read_quarantine_options(const Args& args, JobSettings& job, QuarantineHooks& hooks);

// --metrics ADDR of `run` and `worker`: the live metrics and their HTTP
// server, listening before the run starts and stopped when this goes.
struct MetricsEndpoint {
  metrics::LiveMetrics live;
  std::unique_ptr<metrics::MetricsServer> server;  // declared last: stops before `live` goes

  explicit MetricsEndpoint(const std::optional<std::string>& store_dir) : live(store_dir) {}
  // A read of a large store in progress is cut short first: the run's end
  // does not wait for it.
  ~MetricsEndpoint() {
    live.stop();
    server.reset();
  }
  MetricsEndpoint(const MetricsEndpoint&) = delete;
  MetricsEndpoint& operator=(const MetricsEndpoint&) = delete;
};

// Null without --metrics. Otherwise binds the address and serves; with a
// store (`store_dir`), the store's metrics are part of the answer. `metrics`
// is then the live run metrics, with the run's `slots` from the first scrape
// on, and the URL is said on stderr ("pillbox COMMAND: metrics at URL").
// Errors (usage): a malformed address, one that cannot be bound (in use).
Expected<std::unique_ptr<MetricsEndpoint>> start_metrics(const Args& args, const std::optional<std::string>& store_dir,
                                                         const std::string& command, std::size_t slots,
                                                         metrics::RunMetrics*& metrics);

}  // namespace pillbox::cli
