#pragma once
// The library entry point behind `pillbox worker`: the attempt engine
// (supervisor/flow/task_flow.h) over a StreamBackEnd (stream_back_end.h) on
// two BrokerLinks (broker_link.h) to one Redis, or over an AmqpBackEnd
// (amqp_back_end.h) on two AmqpLinks to one RabbitMQ, driven by the
// dispatcher until SIGTERM or SIGINT, --exit-when-idle, or a broker error
// that is not a lost connection. The CLI is a thin layer over this.
#include "shared/status.h"
#include <optional>

#include "supervisor/broker/amqp_connection.h"
#include "supervisor/broker/redis_connection.h"
#include "supervisor/broker/worker_settings.h"
#include "supervisor/exec/dispatcher.h"
#include "supervisor/metrics/run_metrics.h"

namespace pillbox::broker {

struct WorkerJobSettings {
  RedisAddress address;
  // --amqp: a RabbitMQ worker instead, of the queue worker.keys.stream
  // names (amqp_back_end.h); `address` is then unused.
  std::optional<AmqpAddress> amqp;
  // --prefetch on RabbitMQ (0: default_amqp_prefetch of --jobs).
  std::size_t amqp_prefetch = 0;
  RunSettings run;
  WorkerSettings worker;
  // --metrics: counts what the worker does (supervisor/metrics/metered_run.h);
  // null: nothing counted. Not owned; outlives run_worker.
  metrics::RunMetrics* metrics = nullptr;
};

struct WorkerJobReport {
  RunReport run;
  WorkerReport worker;
};

// Errors: Redis cannot be reached at the start, the key is not a stream, or
// the sandbox cannot start. A Redis error mid-run (one that is not a lost
// connection or a "cannot serve now") stops the worker: the report says so
// in worker.error; what it held stays pending for the fleet.
Expected<WorkerJobReport> run_worker(const WorkerJobSettings& settings, WorkerSink& sink);

// "HOST:PID": the default consumer name, unique on a host at a time.
std::string default_consumer_name();

}  // namespace pillbox::broker
