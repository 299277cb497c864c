// pillbox worker --redis URL --stream NAME (--handler H | -- CMD ARGS...):
// a long-running worker of the fleet (docs/distributed.md). Thin over
// supervisor/cli/worker_job.h.
#include <cstdio>
#include <nlohmann/json.hpp>
#include <string>

#include "shared/task_input.h"
#include "supervisor/broker/amqp_topology.h"
#include "supervisor/broker/kafka_config.h"
#include "supervisor/broker/kafka_publisher.h"
#include "supervisor/cli/args.h"
#include "supervisor/cli/child_options.h"
#include "supervisor/cli/commands.h"
#include "supervisor/cli/exit_code.h"
#include "supervisor/cli/fleet_key_option.h"
#include "supervisor/cli/run_job.h"
#include "supervisor/cli/run_options.h"
#include "supervisor/cli/run_output.h"
#include "supervisor/cli/worker_job.h"
#include "supervisor/exec/host_view.h"
#include "supervisor/io/terminal_text.h"

namespace pillbox::cli {
namespace {

const char* kHelp =
    "usage: pillbox worker --redis URL --stream NAME [options] (--handler H [--arg K=V]... | -- CMD ARGS...)\n"
    "       pillbox worker --amqp URL --queue NAME [options] (--handler H [--arg K=V]... | -- CMD ARGS...)\n"
    "       pillbox worker --kafka HOST:PORT[,...] --topic NAME [options] (--handler H [--arg K=V]... | -- CMD ARGS...)\n"
    "\n"
    "Runs the entries of a Redis stream (fields `key`, `payload`: see `pillbox submit`), each in its own\n"
    "confined child exactly as `pillbox run` does, as one consumer of a consumer group: start as many\n"
    "workers on as many machines as you like. Ok results go to the stream NAME:results; poison payloads\n"
    "(the same failure twice, or --max-attempts failures) to the dead-letter stream NAME:dlq, with the\n"
    "full record. The attempt count is Redis's delivery count, so a worker killed mid-task still counts;\n"
    "entries of dead workers are taken over after --claim-idle. SIGTERM: finish what runs, read nothing\n"
    "new, exit. See docs/distributed.md.\n"
    "\n"
    "On RabbitMQ (--amqp), the work queue NAME is a quorum queue whose messages (body: the payload, header\n"
    "`key`) are consumed --jobs at a time: ok results go to the message's reply_to with its correlation_id,\n"
    "else to the queue NAME.results; dead letters to NAME.dlx (the stream queue NAME.dlq); a retry waits in\n"
    "a delay queue NAME.delay.MS, holding no slot. The attempt count is the broker's x-delivery-count plus\n"
    "the deliveries a message's copies carry (docs/distributed.md, RabbitMQ).\n"
    "\n"
    "On Kafka (--kafka), the worker is a member of the consumer group --group reading the topic NAME: ok\n"
    "results go to NAME.results, dead letters to NAME.dlq; each attempt is written to the attempt log\n"
    "NAME.pillbox-attempts before it runs (Kafka keeps no delivery count), and a partition's offset is\n"
    "committed only up to its first record not yet settled. A retry waits in the worker; the records\n"
    "behind it run meanwhile (docs/distributed.md, Kafka).\n"
    "\n"
    "options:\n"
    "  --redis URL         redis://HOST[:PORT][/DB]\n"
    "  --stream NAME       the stream of tasks (on Redis Cluster, a hash tag: {orders})\n"
    "  --amqp URL, --queue NAME\n"
    "                      RabbitMQ instead: amqp://USER:PASS@HOST:PORT/VHOST and the work queue (declared,\n"
    "                      or checked, with NAME.dlx, NAME.dlq and NAME.results)\n"
    "  --kafka BROKERS, --topic NAME\n"
    "                      Kafka instead: HOST:PORT of one or more brokers (commas) and the topic of\n"
    "                      tasks; NAME.pillbox-attempts, NAME.dlq and NAME.results must exist with at\n"
    "                      least NAME's partitions\n"
    "  --create-topics     Kafka: create those that are missing (Admin CreateTopics)\n"
    "  --session-timeout D Kafka: the group's session timeout: a worker that died is out of the group,\n"
    "                      its partitions handed to the others, after D (default 10s; the broker\n"
    "                      bounds it: group.min.session.timeout.ms, 6s by default)\n"
    "  --behind-after D    Kafka: say that a partition is behind when its commit has waited (a record\n"
    "                      waits for its retry or runs long) or its lag has grown for D, and when it\n"
    "                      catches up (default 30s; the lag is in /metrics with --metrics)\n"
    "  --group G           the consumer group (default pillbox; created when missing)\n"
    "  --consumer NAME     this worker's name in the group (default HOST:PID)\n"
    "  --handler NAME, --arg K=V, --policy P, --timeout D, --cpu D, --memory S, --max-output S,\n"
    "  --writable PATH, --share PATH, --mode M   what runs and under which limits, as for `pillbox run`\n"
    "  --jobs N            children running at once (default: number of cores)\n"
    "  --prefetch N        RabbitMQ: messages the worker holds at once, running or next in line (default\n"
    "                      --jobs, at least --jobs). More is faster (4 x --jobs: the next message is\n"
    "                      here when a slot frees) and brings more duplicate results when a worker or\n"
    "                      the broker dies; a suspect (its last delivery never reported back) runs\n"
    "                      alone either way: what is held beside it is given back\n"
    "  --max-attempts N    charged failures before an entry is dead-lettered (default 3); the same\n"
    "                      deterministic failure twice in a row dead-letters at once; N deliveries\n"
    "                      that never reported back (workers died) dead-letter as supervisor-lost\n"
    "  --backoff-base D, --backoff-max D, --retry-exit-code N   retries, as for `pillbox run`\n"
    "  --claim-idle D      take over entries pending on a worker silent this long (default 30s);\n"
    "                      held entries are renewed three times as often\n"
    "  --exit-when-idle D  exit once nothing new or claimable came for D (batch jobs, tests); on Kafka,\n"
    "                      counted while the group has given the worker its share, not in a rebalance\n"
    "  --max-payload SIZE  larger payloads are dead-lettered unrun as protocol-error (default 512M;\n"
    "                      on Kafka 1000000 bytes, submit's default there: raise both only with the\n"
    "                      topics' max.message.bytes)\n"
    "  --fleet-key FILE    sign every dead letter with the fleet's secret key (a 0600 file of 32 bytes or\n"
    "                      more; default $PILLBOX_FLEET_KEY): operators' verbs given the same key run\n"
    "                      only signed ones. Make one with (umask 077; openssl rand -hex 32 > FILE)\n"
    "  --max-key SIZE      longer keys are dead-lettered unrun as protocol-error (default 4K)\n"
    "  --results-maxlen N  keep about N entries in NAME:results (default 100000; 0: no cap)\n"
    "  --results-max-output SIZE\n"
    "                      an ok result with a larger output goes to NAME:results without it: its\n"
    "                      size and SHA-256 in output_omitted, output_size, output_sha256 (default 1M);\n"
    "                      NAME:results then holds at most about N x SIZE bytes of outputs\n"
    "  --no-results        do not write NAME:results (ok entries are acknowledged and deleted)\n"
    "  --recreate-group    when Redis restarts without its data (no persistence) and the consumer group\n"
    "                      is gone, make it anew and go on with what is submitted from then on;\n"
    "                      without it the worker stops (exit 3). Either way it says what it knows\n"
    "                      was lost: its results and dead letters, the entries it was running\n"
    "  --breaker-window N, --breaker-threshold F, --breaker-probe-interval D, --breaker-max-wait D,\n"
    "  --no-breaker        outage detection, as for `pillbox run`: failures held uncharged, intake\n"
    "                      paused while this worker's handler looks broken\n"
    "  --json              one JSON object per settled entry on stdout\n"
    "  --quiet             no per-entry lines, no summary\n"
    "  --metrics ADDR      serve Prometheus metrics at http://ADDR/metrics while the worker runs:\n"
    "                      HOST:PORT, or PORT alone on 127.0.0.1; port 0 picks a free one (the URL\n"
    "                      is printed on stderr)\n"
    "\n"
    "exit codes: 0 stopped by --exit-when-idle, 2 usage error, 3 the broker or the sandbox cannot be used,\n"
    "            143/130 stopped by SIGTERM/SIGINT (after finishing what ran)\n";

const std::vector<OptionSpec> kWorkerOptions = {
    {"redis"},         {"stream"},          {"amqp"},           {"queue"},             {"group"},          {"consumer"},          {"jobs"},
    {"claim-idle"},    {"exit-when-idle"},  {"results-maxlen"}, {"no-results", false}, {"json", false},
    {"max-payload"},   {"quiet", false},    {"help", false},    {"fleet-key"},         {"max-key"},
    {"results-max-output"}, {"recreate-group", false}, {"prefetch"}, {"kafka"}, {"topic"}, {"create-topics", false}, {"session-timeout"},
    {"behind-after"}};

std::vector<OptionSpec> worker_option_specs() {
  std::vector<OptionSpec> options;
  for (const auto* section : {&kChildOptions, &kWorkerOptions, &kRetryOptions, &kBreakerOptions, &kMetricsOptions}) {
    options.insert(options.end(), section->begin(), section->end());
  }
  return options;
}

int fail(const std::string& message, int code) { return command_error("worker", message, code); }

class CliWorkerSink final : public broker::WorkerSink {
 public:
  CliWorkerSink(bool json, bool quiet) : json_(json), quiet_(quiet) {}

  void on_verdict(const Task& task, const Outcome& outcome, const broker::WorkerVerdict& v) override {
    if (json_) {
      auto j = nlohmann::json::parse(outcome_json(task, outcome, nullptr), nullptr, false);
      if (j.is_discarded()) j = nlohmann::json::object();
      if (v.type == broker::WorkerVerdict::Type::kReleased || v.type == broker::WorkerVerdict::Type::kTakenOver) {
        j = {{"key", task.key}};
      }
      j["verdict"] = broker::to_string(v.type);
      j["verdict_reason"] = v.reason;
      j["entry"] = v.entry;
      j["deliveries"] = v.deliveries;
      if (!v.added.empty()) j[v.type == broker::WorkerVerdict::Type::kOk ? "result_entry" : "dlq_entry"] = v.added;
      print_json_line(j.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace));
      return;
    }
    if (quiet_) return;
    switch (v.type) {
      case broker::WorkerVerdict::Type::kOk:
      case broker::WorkerVerdict::Type::kDeadLettered:
        std::printf("%s  -> %s %s (entry %s, delivery %lld)\n", outcome_line(task, outcome).c_str(),
                    std::string(broker::to_string(v.type)).c_str(), v.added.c_str(), v.entry.c_str(),
                    static_cast<long long>(v.deliveries));
        break;
      default:
        // The reason may quote Redis (an error, a count): inert too.
        std::printf("%-13s %s  entry %s: %s\n", std::string(broker::to_string(v.type)).c_str(),
                    table_cell(task.key, 200).c_str(), v.entry.c_str(), table_cell(v.reason, 0).c_str());
    }
    std::fflush(stdout);
  }

  void on_notice(const std::string& message) override {
    std::fprintf(stderr, "pillbox worker: %s\n", message.c_str());
    std::fflush(stderr);
  }

 private:
  bool json_;
  bool quiet_;
};

}  // namespace

int worker_command(int argc, char** argv) {
  int exit_code = kExitOk;
  auto args = parse_command(argc, argv, 2, worker_option_specs(), "worker", kHelp, exit_code);
  if (!args) return exit_code;
  if (!args->positional().empty()) {
    return fail("unexpected argument '" + args->positional().front() +
                    "': the worker reads its tasks from --stream (to add tasks: pillbox submit)",
                kExitUsage);
  }
  broker::WorkerJobSettings job;
  std::string queue_or_stream;
  if (args->value("kafka")) {
    for (const char* other : {"redis", "stream", "amqp", "queue"}) {
      if (args->value(other)) {
        return fail(std::string("--") + other + " does not go with --kafka: give --kafka BROKERS --topic NAME", kExitUsage);
      }
    }
    for (const char* not_kafka : {"claim-idle", "recreate-group", "prefetch", "results-maxlen"}) {
      if (args->value(not_kafka) || args->flag(not_kafka)) {
        return fail(std::string("--") + not_kafka + " is not for Kafka: the group hands each partition to one member, "
                    "and a member that dies is out of it after its session timeout",
                    kExitUsage);
      }
    }
    const auto topic = args->value("topic");
    if (!topic) return fail("--kafka needs --topic NAME (the topic of tasks)", kExitUsage);
    if (auto s = broker::check_kafka_topic_name(*topic); !s) return fail(s.message(), kExitUsage);
    auto bootstrap = broker::parse_kafka_bootstrap(*args->value("kafka"));
    if (!bootstrap) return fail(bootstrap.error(), exit_code_for(bootstrap.error_code()));
    job.kafka = std::move(*bootstrap);
    job.kafka_create_topics = args->flag("create-topics");
    if (auto s = read_duration(*args, "session-timeout", 1000, 3'600'000ull, job.kafka_session_timeout); !s) {
      return fail(s.message(), kExitUsage);
    }
    if (auto s = read_duration(*args, "behind-after", 100, 7 * 24 * 3'600'000ull, job.kafka_behind_after); !s) {
      return fail(s.message(), kExitUsage);
    }
    queue_or_stream = *topic;
  } else if (args->value("topic") || args->flag("create-topics") || args->value("session-timeout") ||
             args->value("behind-after")) {
    return fail(std::string("--") +
                    (args->value("topic")             ? "topic"
                     : args->value("session-timeout") ? "session-timeout"
                     : args->value("behind-after")    ? "behind-after"
                                                      : "create-topics") +
                    " goes with --kafka BROKERS",
                kExitUsage);
  } else if (args->value("amqp")) {
    auto target = read_amqp_target(*args);
    if (!target) return fail(target.error(), exit_code_for(target.error_code()));
    job.amqp = target->address;
    queue_or_stream = target->queue;
    for (const char* redis_only : {"group", "claim-idle", "recreate-group"}) {
      if (args->flag(redis_only)) {
        return fail(std::string("--") + redis_only + " is for Redis streams: on RabbitMQ the broker hands each "
                    "message to one consumer and takes back what a lost connection held", kExitUsage);
      }
    }
  } else {
    auto fleet = read_fleet_target(*args, "--stream NAME is required");
    if (!fleet) return fail(fleet.error(), exit_code_for(fleet.error_code()));
    job.address = fleet->address;
    queue_or_stream = fleet->stream;
  }
  auto run = read_run_settings(*args);
  if (!run) return fail(run.error(), kExitUsage);
  job.run = std::move(*run);
  JobSettings retry_job;  // the retry options' reader fills a JobSettings
  retry_job.run = job.run;
  if (auto s = read_retry_options(*args, retry_job); !s) return fail(s.message(), kExitUsage);
  if (auto s = read_breaker_options(*args, job.worker.breaker); !s) return fail(s.message(), kExitUsage);
  broker::WorkerSettings& w = job.worker;
  w.retry = retry_job.retry;
  if (args->value("prefetch")) {
    if (!job.amqp) {
      return fail("--prefetch is for RabbitMQ (--amqp): a Redis worker reads what it has slots for", kExitUsage);
    }
    long prefetch = 0;
    if (auto s = read_whole_number(*args, "prefetch", 1, 65535, prefetch); !s) return fail(s.message(), kExitUsage);
    if (static_cast<std::size_t>(prefetch) < job.run.jobs) {
      return fail("--prefetch " + std::to_string(prefetch) + " is below --jobs " + std::to_string(job.run.jobs) +
                      ": the worker would leave slots idle; give at least --jobs",
                  kExitUsage);
    }
    job.amqp_prefetch = static_cast<std::size_t>(prefetch);
  }
  if (job.amqp) {
    // The record names the work queue; results and dead letters go to its neighbours.
    const auto names = broker::amqp_queue_names(queue_or_stream);
    w.keys.stream = names.work;
    w.keys.dlq = names.dlq;
    w.keys.results = names.work + ".results";
  } else {
    w.keys = broker::stream_keys(queue_or_stream);
  }
  w.consumer.group = args->value("group").value_or("pillbox");
  w.consumer.name = args->value("consumer").value_or(broker::default_consumer_name());
  if (w.consumer.group.empty() || w.consumer.name.empty()) return fail("--group and --consumer cannot be empty", kExitUsage);
  w.identity = run_identity(job.run.config);
  w.hidden_path = [config = job.run.config](const Outcome& o) { return hidden_host_path(config, o); };
  if (auto s = read_duration(*args, "claim-idle", 100, 24 * 3'600'000ull, w.claim_idle); !s) {
    return fail(s.message(), kExitUsage);
  }
  std::chrono::milliseconds idle{0};  // at least 1ms when given
  if (auto s = read_duration(*args, "exit-when-idle", 1, 7 * 24 * 3'600'000ull, idle); !s) {
    return fail(s.message(), kExitUsage);
  }
  if (idle.count() > 0) w.exit_when_idle = idle;
  if (auto s = read_whole_number(*args, "results-maxlen", 0, 1'000'000'000, w.results_maxlen); !s) {
    return fail(s.message(), kExitUsage);
  }
  w.results = !args->flag("no-results");
  w.recreate_group = args->flag("recreate-group");
  // On Kafka, submit's default (what a default broker takes, less room for
  // the key and headers): a larger record is none of submit's, and is
  // refused here as protocol-error, unrun, as submit refuses it.
  if (job.kafka) w.max_payload = broker::kDefaultMaxKafkaPayload;
  for (const auto& [name, target] : {std::pair{"max-payload", &w.max_payload}, {"max-key", &w.max_key},
                                     {"results-max-output", &w.results_max_output}}) {
    auto size = read_size(*args, name);
    if (!size) return fail(size.error(), kExitUsage);
    if (*size) *target = static_cast<std::size_t>(**size);
  }
  if (w.max_key > kMaxTaskKeyBytes) {
    return fail("--max-key " + std::to_string(w.max_key) + " is over " + std::to_string(kMaxTaskKeyBytes) +
                    ", the longest key a task can be given (its file name, {key} and $PILLBOX_KEY)",
                kExitUsage);
  }
  auto key = read_fleet_key(*args);
  if (!key) return fail(key.error(), kExitUsage);
  w.fleet_key = std::move(*key);
  // Tasks read what their uid may: a key they could read is a key any
  // payload can sign forged dead letters with.
  if (w.fleet_key && (!job.run.config.drop_privileges || job.run.config.sandbox_uid == w.fleet_key->owner() ||
                      (job.run.config.policy.isolation.uid_pool_size > 0 &&
                       w.fleet_key->owner() >= job.run.config.policy.isolation.uid_pool_first &&
                       w.fleet_key->owner() - job.run.config.policy.isolation.uid_pool_first <
                           job.run.config.policy.isolation.uid_pool_size))) {
    return fail("the fleet key's file belongs to uid " + std::to_string(w.fleet_key->owner()) +
                    ", which this worker's tasks run as (without root they run as your own uid): any payload could "
                    "read the key and sign forged dead letters. Run the worker as root (its tasks then run as the "
                    "policy's uids, which cannot read a 0600 key of root's), or without --fleet-key",
                kExitUsage);
  }
  if (!w.fleet_key) {
    std::fprintf(stderr,
                 "pillbox worker: no --fleet-key (nor PILLBOX_FLEET_KEY): the dead letters of this worker are "
                 "unsigned, and operators' verbs run them only with --trust-unsigned (docs/security.md)\n");
  }

  // Listening before anything runs: a port in use stops the worker here.
  auto endpoint = start_metrics(*args, std::nullopt, "worker", job.run.jobs, job.metrics);
  if (!endpoint) return fail(endpoint.error(), kExitUsage);

  CliWorkerSink sink(args->flag("json"), args->flag("quiet"));
  const auto started = std::chrono::steady_clock::now();
  auto report = broker::run_worker(job, sink);
  endpoint->reset();
  if (!report) return work_error("worker", report.error(), report.error_code());
  const auto& r = report->worker;
  if (!args->flag("quiet")) {
    const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - started).count();
    if (job.kafka) {
      std::fprintf(stderr,
                   "pillbox worker: %s in %.1f s: %zu records received, %zu ok, %zu dead-lettered (%zu malformed), "
                   "%zu released, %zu handed over (a rebalance)\n",
                   w.consumer.name.c_str(), seconds, r.deliveries, r.ok, r.dead_lettered, r.protocol_errors,
                   r.released, r.taken_over);
    } else if (job.amqp) {
      std::fprintf(stderr,
                   "pillbox worker: %s in %.1f s: %zu messages received, %zu ok, %zu dead-lettered (%zu malformed), "
                   "%zu retries (through delay queues), %zu given back, %zu taken back by the broker; RabbitMQ lost "
                   "%zu time%s\n",
                   w.consumer.name.c_str(), seconds, r.deliveries, r.ok, r.dead_lettered, r.protocol_errors, r.retried,
                   r.released, r.taken_over, r.redis_lost, r.redis_lost == 1 ? "" : "s");
    } else {
      std::fprintf(stderr,
                   "pillbox worker: %s in %.1f s: %zu entries received (%zu taken over from idle workers), "
                   "%zu ok, %zu dead-lettered (%zu malformed), %zu retries, %zu released, %zu taken over by others; "
                   "Redis lost %zu time%s\n",
                   w.consumer.name.c_str(), seconds, r.deliveries, r.claimed, r.ok, r.dead_lettered, r.protocol_errors,
                   r.retried, r.released, r.taken_over, r.redis_lost, r.redis_lost == 1 ? "" : "s");
    }
    if (r.redis_restarts > 0) {
      std::fprintf(stderr,
                   "pillbox worker: Redis restarted %zu time%s meanwhile; gone with %s: %zu results and %zu dead "
                   "letters this worker wrote%s\n",
                   r.redis_restarts, r.redis_restarts == 1 ? "" : "s", r.redis_restarts == 1 ? "it" : "them",
                   r.results_lost, r.dead_letters_lost,
                   r.groups_recreated > 0 ? "; the consumer group was made anew (--recreate-group)" : "");
    }
    if (r.claimed_again > 0) {
      std::fprintf(stderr,
                   "pillbox worker: %zu times an entry this worker held was claimed by itself again (its claim's "
                   "renewal came later than --claim-idle: Redis slow or unreachable?)\n",
                   r.claimed_again);
    }
    for (const auto& warning : report->run.warnings) std::fprintf(stderr, "pillbox worker: warning: %s\n", warning.c_str());
  }
  if (!r.error.empty()) {
    // The error itself was said when the worker began to stop (its notice).
    if (job.amqp) {
      std::fprintf(stderr,
                   "pillbox worker: stopped by that RabbitMQ error; what it held and did not settle goes back to the "
                   "queue as its connection closes (the broker delivers it again)\n");
      return kExitSetup;
    }
    if (job.kafka) {
      std::fprintf(stderr,
                   "pillbox worker: stopped by that Kafka error; what it held and did not settle is left uncommitted "
                   "to its partitions' next owner (the group hands them on as this worker leaves it)\n");
      return kExitSetup;
    }
    std::fprintf(stderr,
                 "pillbox worker: stopped by that Redis error; what it held stays pending, taken over by the fleet "
                 "after --claim-idle\n");
    return kExitSetup;
  }
  return r.stop_signal != 0 ? 128 + r.stop_signal : kExitOk;
}

}  // namespace pillbox::cli
