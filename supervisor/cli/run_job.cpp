#include "supervisor/cli/run_job.h"

#include <unistd.h>

#include <memory>

#include <nlohmann/json.hpp>

#include "shared/policy_parser.h"
#include "supervisor/exec/handler_version.h"
#include "supervisor/exec/host_view.h"
#include "supervisor/flow/memory_attempt_store.h"
#include "supervisor/flow/sqlite_attempt_store.h"
#include "supervisor/metrics/live_run_file.h"
#include "supervisor/metrics/metered_run.h"
#include "supervisor/store/death_note.h"
#include "supervisor/store/store.h"

namespace pillbox {

RunIdentity run_identity(const ChildConfig& config) {
  RunIdentity id;
  id.handler = config.handler;
  id.handler_identity = handler_identity(config);
  nlohmann::json args = nlohmann::json::object();
  for (const auto& [k, v] : config.args) args[k] = v;
  // Arguments are the operator's bytes, not necessarily UTF-8.
  id.handler_args = args.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
  id.exec_argv = nlohmann::json(config.exec_argv).dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
  id.working_dir = config.working_dir;
  HandlerVersion version = handler_version(config);
  id.handler_version = std::move(version.id);
  id.versioned_scripts = std::move(version.scripts);
  id.policy_identity = policy_identity(config.policy);
  id.policy = format_policy(config.policy);
  return id;
}

Expected<JobReport> run_job(const JobSettings& settings, TaskSource& source, VerdictSink& sink) {
  FlowSettings flow_settings;
  flow_settings.retry = settings.retry;
  flow_settings.breaker = settings.breaker;
  flow_settings.rerun_done = settings.rerun_done;
  flow_settings.rerun_outdated = settings.rerun_outdated;
  flow_settings.done_results = settings.done_results;
  flow_settings.identity = run_identity(settings.run.config);
  flow_settings.hidden_path = [config = settings.run.config](const Outcome& o) { return hidden_host_path(config, o); };
  if (settings.retry.max_attempts == 0) return Error{"--max-attempts must be at least 1"};

  std::optional<store::Store> opened;
  std::optional<store::Ledger> ledger;
  std::optional<store::QuarantineStore> quarantine;
  std::optional<store::ResultStore> results;
  JobReport report;
  if (settings.store_dir) {
    auto s = store::Store::open(*settings.store_dir);
    if (!s) return Error{s.error()};
    opened.emplace(std::move(*s));
    auto l = store::Ledger::open(opened->db(), flow_settings.identity.handler_identity,
                                 flow_settings.identity.policy_identity);
    if (!l) return Error{l.error()};
    ledger.emplace(std::move(*l));
    ledger->set_version(flow_settings.identity.handler_version);
    // How earlier runs died is evidence about the tasks they left unfinished;
    // a crash of this run is noted for the next one.
    if (auto s = ledger->record_deaths(opened->dir()); !s) return Error{s.message()};
    if (auto s = arm_death_note(opened->dir(), ledger->run_id()); !s) return Error{s.message()};
    auto q = store::QuarantineStore::open(opened->db(), opened->dir(), settings.max_records);
    if (!q) return Error{q.error()};
    quarantine.emplace(std::move(*q));
    auto r = store::ResultStore::open(opened->db());
    if (!r) return Error{r.error()};
    results.emplace(std::move(*r));
    report.store_dir = opened->dir();
  }
  // With --metrics or a store, the flow's verdicts and the dispatcher's
  // steps are counted on their way; nothing else changes. A store gets the
  // counts as a live file (S/live/RUN_ID.json) for `pillbox serve`'s /runs.
  std::optional<metrics::RunMetrics> own_metrics;
  if (settings.metrics == nullptr && opened) own_metrics.emplace();
  metrics::RunMetrics* counted = settings.metrics != nullptr ? settings.metrics : own_metrics ? &*own_metrics : nullptr;
  std::optional<metrics::MeteredVerdicts> metered_sink;
  if (counted != nullptr) metered_sink.emplace(sink, *counted);
  VerdictSink& verdicts = metered_sink ? static_cast<VerdictSink&>(*metered_sink) : sink;
  // Where the flow's effects go: the store, or memory (--no-store).
  std::unique_ptr<AttemptStore> attempts;
  if (ledger) {
    attempts = std::make_unique<SqliteAttemptStore>(
        *ledger, *quarantine,
        BatchContext{flow_settings.identity, "pillbox run (pid " + std::to_string(::getpid()) + ")", report.store_dir,
                     results ? &*results : nullptr, settings.keep_results});
  } else {
    attempts = std::make_unique<MemoryAttemptStore>();
  }
  TaskFlow flow(flow_settings, source, verdicts, *attempts, settings.on_quarantine);
  Expected<RunReport> run = Error{"not run"};
  if (counted != nullptr) {
    counted->set_slots(settings.run.jobs);
    metrics::MeteredRun metered(flow, flow, *counted, [&flow] { return flow.breaker_open(); });
    // Removed when the run ends, however it ends short of SIGKILL.
    std::optional<metrics::LiveRunFile> live;
    if (opened) live.emplace(opened->dir(), ledger->run_id(), *counted);
    run = run_tasks(settings.run, metered, metered);
  } else {
    run = run_tasks(settings.run, flow, flow);
  }
  // Whatever happened, what is known goes to the ledger.
  const Status finished = flow.finish(run ? "" : run.error());
  disarm_death_note();
  report.flow = flow.report();
  if (report.flow.stop_signal != 0) {
    report.stop_signal = report.flow.stop_signal;
    if (!finished) return Error{finished.message()};
    return report;
  }
  if (!run) return Error{run.error(), run.error_code()};
  if (!finished) return Error{finished.message()};
  report.run = std::move(*run);
  return report;
}

}  // namespace pillbox
