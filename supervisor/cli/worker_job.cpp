#include "supervisor/cli/worker_job.h"

#include <unistd.h>

#include <climits>
#include <optional>

#include "supervisor/metrics/metered_run.h"

namespace pillbox::broker {

std::string default_consumer_name() {
  char host[HOST_NAME_MAX + 1] = {};
  if (::gethostname(host, sizeof host - 1) != 0 || host[0] == '\0') std::snprintf(host, sizeof host, "localhost");
  return std::string(host) + ":" + std::to_string(::getpid());
}

Expected<WorkerJobReport> run_worker(const WorkerJobSettings& settings, WorkerSink& sink) {
  WorkerSettings worker_settings = settings.worker;
  {
    auto redis = RedisConnection::open(settings.address);
    if (!redis) return Error{redis.error(), redis.error_code()};
    if (auto s = create_group(*redis, settings.worker.keys, settings.worker.consumer.group); !s) {
      return Error{s.message(), s.code()};
    }
    // The server as it is now: after an outage, a new run id is a restart.
    auto state = server_state(*redis, settings.worker.keys, settings.worker.consumer.group);
    if (!state) return Error{state.error(), state.error_code()};
    worker_settings.server_run_id = state->run_id;
    // Said, not fatal: entries pending on dead workers can still be taken over.
    const std::string ahead = group_ahead_of_stream(*redis, settings.worker.keys, settings.worker.consumer.group);
    if (!ahead.empty()) sink.on_notice("warning: " + ahead);
  }
  StreamWorker* worker_ptr = nullptr;
  // Lost-and-back news reaches the worker (one notice per outage, not per
  // task); before the worker exists there is nothing to tell.
  auto on_state = [&worker_ptr](bool up, const std::string& what) {
    if (worker_ptr != nullptr) worker_ptr->on_redis_state(up, what);
  };
  auto reader = BrokerLink::open(settings.address, "reads", on_state);
  if (!reader) return Error{reader.error(), reader.error_code()};
  auto writer = BrokerLink::open(settings.address, "settles", on_state);
  if (!writer) return Error{writer.error(), writer.error_code()};
  WorkerJobReport report;
  Expected<RunReport> run = Error{"not run"};
  // With --metrics, verdicts and the dispatcher's steps are counted on their way.
  std::optional<metrics::MeteredWorkerVerdicts> metered_sink;
  if (settings.metrics != nullptr) metered_sink.emplace(sink, *settings.metrics);
  WorkerSink& verdicts = metered_sink ? static_cast<WorkerSink&>(*metered_sink) : sink;
  {
    StreamWorker worker(std::move(worker_settings), **reader, **writer, verdicts);
    worker_ptr = &worker;
    if (settings.metrics != nullptr) {
      settings.metrics->set_slots(settings.run.jobs);
      metrics::MeteredRun metered(worker, worker, *settings.metrics, [&worker] { return worker.breaker_open(); });
      run = run_tasks(settings.run, metered, metered);
    } else {
      run = run_tasks(settings.run, worker, worker);
    }
    // The links stop before the worker goes: nothing of theirs runs later.
    (*reader)->stop();
    (*writer)->stop();
    worker_ptr = nullptr;
    report.worker = worker.report();
  }
  if (!run) return Error{run.error(), run.error_code()};
  report.run = std::move(*run);
  return report;
}

}  // namespace pillbox::broker
