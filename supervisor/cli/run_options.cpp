#include "supervisor/cli/run_options.h"

#include <cstdio>
#include <cstdlib>

#include "shared/policy_parser.h"
#include "supervisor/store/store_dir.h"

namespace pillbox::cli {

const std::vector<OptionSpec> kStoreOptions = {{"store"},          {"no-store", false}, {"rerun", false},
                                                {"rerun-outdated", false}, {"keep-results"}};

const std::vector<OptionSpec> kRetryOptions = {
    {"max-attempts"}, {"backoff-base"}, {"backoff-max"}, {"retry-exit-code", true, true}};

const std::vector<OptionSpec> kBreakerOptions = {{"no-breaker", false},
                                                 {"breaker-window"},
                                                 {"breaker-threshold"},
                                                 {"breaker-probe-interval"},
                                                 {"breaker-max-wait"}};

const std::vector<OptionSpec> kQuarantineOptions = {
    {"quarantine-limit"},
    {"hook-timeout"},
    // Hook commands may carry tokens: kept out of /proc/PID/cmdline (OptionSpec::secret).
    {"on-quarantine", true, false, 0, true},
    {"on-new-fingerprint", true, false, 0, true},
};

const std::vector<OptionSpec> kMetricsOptions = {{"metrics"}};

Expected<std::unique_ptr<MetricsEndpoint>> start_metrics(const Args& args, const std::optional<std::string>& store_dir,
                                                         const std::string& command, std::size_t slots,
                                                         metrics::RunMetrics*& metrics) {
  const auto text = args.value("metrics");
  if (!text) return std::unique_ptr<MetricsEndpoint>();
  auto address = metrics::parse_listen_address(*text);
  if (!address) return Error{address.error(), ErrorCode::kUsage};
  auto endpoint = std::make_unique<MetricsEndpoint>(store_dir);
  MetricsEndpoint* e = endpoint.get();
  auto server = metrics::MetricsServer::start(*address, [e] { return e->live.render(); });
  if (!server) return Error{server.error(), ErrorCode::kUsage};
  endpoint->server = std::move(*server);
  metrics = &endpoint->live.run();
  metrics->set_slots(slots);  // before the URL is out: a scraper told of it sees them at once
  std::fprintf(stderr, "pillbox %s: metrics at %s\n", command.c_str(), endpoint->server->url().c_str());
  std::fflush(stderr);
  return endpoint;
}

Status read_store_options(const Args& args, JobSettings& job) {
  if (args.flag("no-store")) {
    if (args.value("store")) return Status::error("give --store or --no-store, not both");
  } else {
    auto dir = store::resolve_store_dir(args.value("store").value_or(""));
    if (!dir) return Status::error(dir.error());
    job.store_dir = *dir;
  }
  job.rerun_done = args.flag("rerun");
  job.rerun_outdated = args.flag("rerun-outdated");
  if (job.rerun_outdated && !job.store_dir) {
    return Status::error("--rerun-outdated runs again what the store has as ok: not with --no-store");
  }
  if (const auto keep = args.value("keep-results")) {
    if (!job.store_dir) return Status::error("--keep-results keeps results in the store: not with --no-store");
    // The grammar and range of a size in a policy (0 to 1T), as for --memory.
    Limits scratch;
    if (auto s = set_limit(scratch, "file_size", *keep); !s) {
      return Status::error("--keep-results expects a size such as 256M, 1G or 0 (keep none); got '" + *keep + "'");
    }
    job.keep_results = scratch.file_size_bytes;
  }
  return Status::ok();
}

Status read_retry_options(const Args& args, JobSettings& job) {
  RetrySettings& retry = job.retry;
  if (auto s = read_whole_number(args, "max-attempts", 1, 100, retry.max_attempts); !s) return s;
  if (auto s = read_duration(args, "backoff-base", 0, 3'600'000, retry.backoff_base); !s) return s;
  if (auto s = read_duration(args, "backoff-max", 0, 24 * 3'600'000ull, retry.backoff_max); !s) return s;
  for (const auto& code : args.values("retry-exit-code")) {
    if (!job.run.config.exec_mode()) return Status::error("--retry-exit-code is for exec commands (after --)");
    auto n = parse_whole_number("retry-exit-code", code, 1, 255);
    if (!n) return Status::error(n.error());
    retry.retry_exit_codes.insert(static_cast<int>(*n));
  }
  return Status::ok();
}

Status read_breaker_options(const Args& args, BreakerSettings& breaker) {
  breaker.enabled = !args.flag("no-breaker");
  if (auto s = read_whole_number(args, "breaker-window", 2, 100000, breaker.window); !s) return s;
  if (auto v = args.value("breaker-threshold")) {
    char* end = nullptr;
    const double f = std::strtod(v->c_str(), &end);
    if (v->empty() || *end != '\0' || !(f > 0.0 && f <= 1.0)) {
      return Status::error("--breaker-threshold expects a fraction above 0 and at most 1, e.g. 0.8; got '" + *v + "'");
    }
    breaker.threshold = f;
  }
  if (auto s = read_duration(args, "breaker-probe-interval", 10, 3'600'000, breaker.probe_interval); !s) return s;
  return read_duration(args, "breaker-max-wait", 0, 7 * 24 * 3'600'000ull, breaker.max_wait);
}

Status read_quarantine_options(const Args& args, JobSettings& job, QuarantineHooks& hooks) {
  if (auto s = read_whole_number(args, "quarantine-limit", 1, 1'000'000'000, job.max_records); !s) return s;
  if (auto s = read_duration(args, "hook-timeout", 100, 3'600'000, hooks.timeout_); !s) return s;
  if (auto cmd = args.value("on-quarantine")) {
    hooks.every_record_ = std::make_unique<AlertHook>(HookSettings{*cmd, hooks.timeout_});
  }
  if (auto cmd = args.value("on-new-fingerprint")) {
    hooks.new_fingerprints_ = std::make_unique<AlertHook>(HookSettings{*cmd, hooks.timeout_});
  }
  if ((hooks.every_record_ || hooks.new_fingerprints_) && !job.store_dir) {
    return Status::error("--on-quarantine and --on-new-fingerprint need a store (not --no-store)");
  }
  return Status::ok();
}

void QuarantineHooks::fire(const std::string& record_json, bool new_fingerprint) {
  if (every_record_) every_record_->fire(record_json);
  if (new_fingerprints_ && new_fingerprint) new_fingerprints_->fire(record_json);
}

std::vector<std::string> QuarantineHooks::finish() {
  std::vector<std::string> problems;
  for (auto* hook : {every_record_.get(), new_fingerprints_.get()}) {
    if (hook == nullptr) continue;
    hook->finish(timeout_);
    for (const auto& p : hook->problems()) problems.push_back(p);
    if (hook->dropped() > 0) {
      problems.push_back(std::to_string(hook->dropped()) + " hook calls never ran (queue full, or the run ended first)");
    }
  }
  return problems;
}

}  // namespace pillbox::cli
