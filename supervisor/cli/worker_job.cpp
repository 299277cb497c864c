#include "supervisor/cli/worker_job.h"

#include <poll.h>
#include <unistd.h>

#include <algorithm>
#include <climits>
#include <functional>
#include <optional>

#include "supervisor/broker/amqp_back_end.h"
#include "supervisor/broker/amqp_state_log.h"
#include "supervisor/broker/amqp_topology.h"
#include "supervisor/broker/kafka_back_end.h"
#include "supervisor/broker/kafka_worker_topics.h"
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

namespace {

// The engine over `back_end` (task_flow.h, the rules `run` has too), driven
// by the dispatcher until it ends; then what the back end still owes its
// broker is waited for (a step that cannot complete is safe to drop: the
// message or entry stays the broker's), `stop_links` stops its connections,
// and the report is filled in. Both brokers' workers are this.
template <typename BackEnd>
Expected<RunReport> drive(const WorkerJobSettings& settings, const WorkerSettings& worker, BackEnd& back_end,
                          WorkerSink& verdicts, WorkerReport& report, const std::function<void()>& stop_links) {
  FlowSettings flow_settings;
  flow_settings.retry = worker.retry;
  flow_settings.breaker = worker.breaker;
  flow_settings.identity = worker.identity;
  flow_settings.hidden_path = worker.hidden_path;
  flow_settings.seed = worker.seed;
  Expected<RunReport> run = Error{"not run"};
  StreamVerdicts told(back_end, verdicts);
  TaskFlow flow(flow_settings, back_end.intake(), told, back_end);
  if (settings.metrics != nullptr) {
    settings.metrics->set_slots(settings.run.jobs);
    metrics::MeteredRun metered(flow, flow, *settings.metrics, [&flow] { return flow.breaker_open(); });
    run = run_tasks(settings.run, metered, metered);
  } else {
    run = run_tasks(settings.run, flow, flow);
  }
  // An error of the run (not of the broker) ends it here: nothing more is
  // read, and what the intake holds is given back.
  if (!run) back_end.stop_reading(run.error());
  const Status finished = flow.finish(run ? "" : run.error());
  // What finish() gave back reaches the broker before the links stop.
  while (!back_end.quiet() && !back_end.links_down()) {
    std::vector<pollfd> fds;
    for (int fd : back_end.wait_fds()) fds.push_back({fd, POLLIN, 0});
    ::poll(fds.data(), fds.size(), 100);
    back_end.drain();
  }
  // The links stop before the back end goes: nothing of theirs runs later.
  stop_links();
  report = back_end.report();
  report.released += told.released();
  report.taken_over += told.taken_over();
  report.outages = flow.report().outages;
  if (run && !finished && report.error.empty()) report.error = finished.message();
  return run;
}

// What a metered worker's verdicts go through (--metrics), or the sink itself.
WorkerSink& metered(const WorkerJobSettings& settings, WorkerSink& sink,
                    std::optional<metrics::MeteredWorkerVerdicts>& holder) {
  if (settings.metrics == nullptr) return sink;
  holder.emplace(sink, *settings.metrics);
  return *holder;
}

// NAME.results: ok results of messages without a reply_to, bounded
// (--results-maxlen; the oldest go first), durable.
Status declare_results_queue(AmqpConnection& c, const WorkerSettings& worker) {
  std::vector<AmqpField> arguments = {{"x-queue-type", std::string("quorum")}};
  if (worker.results_maxlen > 0) {
    arguments.push_back({"x-max-length", static_cast<std::int64_t>(worker.results_maxlen)});
    arguments.push_back({"x-overflow", std::string("drop-head")});
  }
  auto declared = c.declare_queue(worker.keys.results, arguments);
  if (declared) return Status::ok();
  if (c.refusal() && c.refusal()->code == 406) {
    return Status::error(explain_mismatch(worker.keys.results, c.address().describe(), *c.refusal(), arguments),
                         ErrorCode::kSetup);
  }
  return Status::error(declared.error(), ErrorCode::kSetup);
}

// Every queue and exchange the worker consumes from and publishes to,
// declared (idempotent): at the start, and again on every new publishing
// connection, so that one deleted under a running worker (NAME.dlx,
// NAME.results) is back before the publish runs again. A publish to a
// missing exchange closes the connection, and without this the link ran
// it again, on connection after connection, for ever.
Status declare_worker_queues(AmqpConnection& c, const WorkerSettings& worker) {
  AmqpTopologySettings topology;
  topology.queue = worker.keys.stream;
  // The broker's own limit stays above the worker's --max-attempts: the
  // last resort for a message that kills the worker's supervisor.
  topology.delivery_limit = worker_delivery_limit(worker.retry.max_attempts);
  auto declared = declare_topology(c, topology);
  if (!declared) return Status::error(declared.error(), ErrorCode::kSetup);
  // A replayed message's notice goes there (amqp_replay_notice.h): a
  // publish to no queue is returned, and the worker would stop.
  if (auto s = declare_state_log(c, worker.keys.stream); !s) return s;
  // Every delay queue a retry can need, now rather than when a retry first
  // needs it: RabbitMQ 3.10.8 never gives a leader back to a quorum queue
  // made less than a second before it was killed, and a worker retrying
  // into such a queue waits for its confirm for ever, the settles behind
  // it too (docs/distributed.md, the crash table). Made at the start, the
  // queues share that second with NAME's own; declared again, they cost a
  // round trip each.
  for (const auto bucket : delay_buckets(worker.retry.backoff_max)) {
    if (auto made = declare_delay_queue(c, worker.keys.stream, bucket); !made) {
      return Status::error(made.error(), ErrorCode::kSetup);
    }
  }
  if (worker.results) return declare_results_queue(c, worker);
  return Status::ok();
}

Expected<WorkerJobReport> run_amqp_worker(const WorkerJobSettings& settings, WorkerSink& sink) {
  AmqpWorkerSettings amqp;
  amqp.worker = settings.worker;
  amqp.worker.jobs = settings.run.jobs;
  const std::string queue = amqp.worker.keys.stream;
  {
    auto c = AmqpConnection::open(*settings.amqp);
    if (!c) return Error{c.error(), ErrorCode::kSetup};
    if (auto s = declare_worker_queues(*c, amqp.worker); !s) return Error{s.message(), s.code()};
  }
  AmqpBackEnd* back_end_ptr = nullptr;
  auto on_state = [&back_end_ptr](bool consumer) {
    return [&back_end_ptr, consumer](bool up, const std::string& what) {
      if (back_end_ptr != nullptr) back_end_ptr->on_link_state(consumer, up, what);
    };
  };
  amqp.prefetch = settings.amqp_prefetch > 0 ? settings.amqp_prefetch : default_amqp_prefetch(settings.run.jobs);
  const auto prefetch = static_cast<std::uint16_t>(std::clamp<std::size_t>(amqp.prefetch, 1, 65535));
  auto consumer = AmqpLink::open(*settings.amqp, "consumes", on_state(true), [queue, prefetch](AmqpConnection& c) {
    return c.consume(queue, prefetch);
  });
  if (!consumer) return Error{consumer.error(), ErrorCode::kSetup};
  auto publisher = AmqpLink::open(*settings.amqp, "publishes", on_state(false),
                                  [worker = amqp.worker](AmqpConnection& c) {
                                    if (auto s = c.confirm_publishes(); !s) return s;
                                    return declare_worker_queues(c, worker);
                                  });
  if (!publisher) return Error{publisher.error(), ErrorCode::kSetup};
  WorkerJobReport report;
  std::optional<metrics::MeteredWorkerVerdicts> metered_sink;
  WorkerSink& verdicts = metered(settings, sink, metered_sink);
  Expected<RunReport> run = Error{"not run"};
  {
    AmqpBackEnd back_end(amqp, **consumer, **publisher, verdicts);
    back_end_ptr = &back_end;
    run = drive(settings, amqp.worker, back_end, verdicts, report.worker, [&] {
      (*consumer)->stop();
      (*publisher)->stop();
      back_end_ptr = nullptr;
    });
  }
  if (!run) return Error{run.error(), run.error_code()};
  report.run = std::move(*run);
  return report;
}

Expected<WorkerJobReport> run_kafka_worker(const WorkerJobSettings& settings, WorkerSink& sink) {
  KafkaWorkerSettings kafka;
  kafka.worker = settings.worker;
  kafka.worker.jobs = settings.run.jobs;
  const std::string& topic = kafka.worker.keys.stream;
  auto topics = check_kafka_worker_topics(*settings.kafka, topic, kafka.worker.results, settings.kafka_create_topics);
  if (!topics) return Error{topics.error(), topics.error_code()};
  for (const std::string& made : topics->created) sink.on_notice("created topic " + made);
  kafka.properties = kafka_properties(*settings.kafka, "pillbox-worker " + kafka.worker.consumer.name);
  kafka.attempt_log.brokers = settings.kafka->joined();
  kafka.attempt_log.topic = topic;
  kafka.attempt_log.properties = kafka.properties;
  kafka.session_timeout = settings.kafka_session_timeout;
  kafka.behind_after = settings.kafka_behind_after;
  if (settings.metrics != nullptr) {
    kafka.on_lag = [metrics = settings.metrics, topic](const std::vector<KafkaPartitionLag>& partitions) {
      metrics->set_kafka_partitions(topic, partitions);
    };
  }
  WorkerJobReport report;
  std::optional<metrics::MeteredWorkerVerdicts> metered_sink;
  WorkerSink& verdicts = metered(settings, sink, metered_sink);
  Expected<RunReport> run = Error{"not run"};
  {
    auto back_end = KafkaBackEnd::open(kafka, verdicts);
    if (!back_end) return Error{back_end.error(), back_end.error_code()};
    // The back end leaves the group when the run ends (its partitions go to
    // the others at once, not after a session timeout).
    run = drive(settings, kafka.worker, **back_end, verdicts, report.worker, [&] { (*back_end)->close(); });
  }
  if (!run) return Error{run.error(), run.error_code()};
  report.run = std::move(*run);
  return report;
}

}  // namespace

Expected<WorkerJobReport> run_worker(const WorkerJobSettings& settings, WorkerSink& sink) {
  if (settings.amqp) return run_amqp_worker(settings, sink);
  if (settings.kafka) return run_kafka_worker(settings, sink);
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
  std::optional<metrics::MeteredWorkerVerdicts> metered_sink;
  WorkerSink& verdicts = metered(settings, sink, metered_sink);
  Expected<RunReport> run = Error{"not run"};
  {
    // Redis keeps what the engine decides (stream_back_end.h).
    StreamBackEnd back_end(worker_settings, **reader, **writer, verdicts);
    back_end_ptr = &back_end;
    run = drive(settings, worker_settings, back_end, verdicts, report.worker, [&] {
      (*reader)->stop();
      (*writer)->stop();
      back_end_ptr = nullptr;
    });
  }
  if (!run) return Error{run.error(), run.error_code()};
  report.run = std::move(*run);
  return report;
}

}  // namespace pillbox::broker
