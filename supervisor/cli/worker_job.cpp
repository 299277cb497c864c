#include "supervisor/cli/worker_job.h"

#include <poll.h>
#include <unistd.h>

#include <climits>
#include <optional>

#include "supervisor/broker/stream_back_end.h"
#include "supervisor/broker/stream_verdicts.h"
#include "supervisor/flow/task_flow.h"
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
  worker_settings.jobs = settings.run.jobs;
  StreamBackEnd* back_end_ptr = nullptr;
  // Lost-and-back news reaches the back end (one notice per outage, not per
  // task); before it exists there is nothing to tell.
  auto on_state = [&back_end_ptr](bool up, const std::string& what) {
    if (back_end_ptr != nullptr) back_end_ptr->on_redis_state(up, what);
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
  // The rules are the engine's (task_flow.h), as for `run`; Redis keeps
  // what they decide (stream_back_end.h).
  FlowSettings flow_settings;
  flow_settings.retry = worker_settings.retry;
  flow_settings.breaker = worker_settings.breaker;
  flow_settings.identity = worker_settings.identity;
  flow_settings.hidden_path = worker_settings.hidden_path;
  flow_settings.seed = worker_settings.seed;
  {
    StreamBackEnd back_end(std::move(worker_settings), **reader, **writer, verdicts);
    back_end_ptr = &back_end;
    StreamVerdicts told(back_end, verdicts);
    TaskFlow flow(flow_settings, back_end.intake(), told, back_end);
    if (settings.metrics != nullptr) {
      settings.metrics->set_slots(settings.run.jobs);
      metrics::MeteredRun metered(flow, flow, *settings.metrics, [&flow] { return flow.breaker_open(); });
      run = run_tasks(settings.run, metered, metered);
    } else {
      run = run_tasks(settings.run, flow, flow);
    }
    // An error of the run (not of Redis) ends it here: nothing more is
    // read, and what the intake holds is released.
    if (!run) back_end.stop_reading(run.error());
    const Status finished = flow.finish(run ? "" : run.error());
    // What finish() gave back reaches Redis before the links stop (a step
    // that cannot complete is safe to drop: the protocol leaves its entry
    // pending for the fleet).
    while (!back_end.quiet() && !back_end.links_down()) {
      std::vector<pollfd> fds;
      for (int fd : back_end.wait_fds()) fds.push_back({fd, POLLIN, 0});
      ::poll(fds.data(), fds.size(), 100);
      back_end.drain();
    }
    // The links stop before the back end goes: nothing of theirs runs later.
    (*reader)->stop();
    (*writer)->stop();
    back_end_ptr = nullptr;
    report.worker = back_end.report();
    report.worker.released += told.released();
    report.worker.taken_over += told.taken_over();
    report.worker.outages = flow.report().outages;
    if (run && !finished && report.worker.error.empty()) report.worker.error = finished.message();
  }
  if (!run) return Error{run.error(), run.error_code()};
  report.run = std::move(*run);
  return report;
}

}  // namespace pillbox::broker
