#pragma once
// The library entry point behind `pillbox run`: a source of tasks run through
// the ledger, the retry policy and the circuit breaker (task_flow.h), each
// attempt in its own confined child (supervisor/exec/dispatcher.h), poison
// payloads kept in the quarantine store. The CLI is a thin layer over this.
#include <optional>
#include <string>

#include "shared/status.h"
#include "supervisor/exec/dispatcher.h"
#include "supervisor/flow/task_flow.h"
#include "supervisor/metrics/run_metrics.h"
#include "supervisor/store/result_store.h"

namespace pillbox {

struct JobSettings {
  RunSettings run;
  RetrySettings retry;
  BreakerSettings breaker;
  std::optional<std::string> store_dir;  // resolved directory; nullopt: no store (--no-store)
  std::int64_t max_records = store::kDefaultMaxRecords;
  QuarantineCallback on_quarantine;
  bool rerun_done = false;               // --rerun: run tasks the ledger has as ok again
  bool rerun_outdated = false;           // --rerun-outdated: ... those ok under another version of the scripts
  std::uint64_t keep_results = store::kDefaultKeepResultBytes;  // --keep-results (0: none)
  bool done_results = false;             // run --out: the kept results of tasks skipped as ok
  // --metrics: counts what the run does (supervisor/metrics/metered_run.h);
  // null: nothing counted. Not owned; outlives run_job.
  metrics::RunMetrics* metrics = nullptr;
};

struct JobReport {
  RunReport run;
  FlowReport flow;
  std::string store_dir;  // "" without a store
  int stop_signal = 0;    // SIGINT/SIGTERM stopped the run early (the report is partial)
};

// Errors: the store cannot be opened or written, or the sandbox cannot start.
Expected<JobReport> run_job(const JobSettings& settings, TaskSource& source, VerdictSink& sink);

// What a quarantine record says the tasks of `config` ran under.
RunIdentity run_identity(const ChildConfig& config);

}  // namespace pillbox
