#pragma once
// The library entry point behind `pillbox worker`: the attempt engine
// (supervisor/flow/task_flow.h) over a StreamBackEnd (stream_back_end.h) on
// two BrokerLinks (broker_link.h) to one Redis, or over an AmqpBackEnd
// (amqp_back_end.h) on two AmqpLinks to one RabbitMQ, or over a
// KafkaBackEnd (kafka_back_end.h) in a group of a Kafka cluster, driven by the
// dispatcher until SIGTERM or SIGINT, --exit-when-idle, or a broker error
// that is not a lost connection. The CLI is a thin layer over this.
#include "shared/status.h"
#include <chrono>
#include <optional>

#include "supervisor/broker/amqp_connection.h"
#include "supervisor/broker/kafka_config.h"
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
  // --kafka: a Kafka worker instead, of the topic worker.keys.stream names
  // in the group worker.consumer.group (kafka_back_end.h).
  std::optional<KafkaBootstrap> kafka;
  // --create-topics: the topics the Kafka worker needs, made when missing.
  bool kafka_create_topics = false;
  // --session-timeout: how long the group waits for a Kafka worker that
  // stopped answering (a dead one's partitions move after this).
  std::chrono::milliseconds kafka_session_timeout{10'000};
  // --behind-after: a Kafka partition whose commit has waited, or whose lag
  // has grown, this long is said to be behind (kafka_lag.h).
  std::chrono::milliseconds kafka_behind_after{30'000};
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
