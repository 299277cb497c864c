// pillbox submit (--redis URL --stream NAME | --amqp URL --queue NAME |
// --kafka BROKERS --topic NAME) INPUT...: the tasks of the inputs, read
// exactly as `run` reads them, added to a Redis stream, a RabbitMQ queue or a
// Kafka topic for the fleet's workers. Thin over
// supervisor/broker/task_submit.h and its three back ends.
#include <unistd.h>

#include <cstdio>
#include <memory>
#include <string>

#include "supervisor/broker/amqp_publisher.h"
#include "supervisor/broker/kafka_publisher.h"
#include "supervisor/broker/redis_connection.h"
#include "supervisor/broker/stream_publisher.h"
#include "supervisor/cli/args.h"
#include "supervisor/cli/child_options.h"
#include "supervisor/cli/commands.h"
#include "supervisor/cli/fleet_key_option.h"
#include "supervisor/cli/exit_code.h"
#include "supervisor/cli/path_options.h"
#include "supervisor/flow/input_source.h"
#include "supervisor/io/terminal_text.h"

namespace pillbox::cli {
namespace {

const char* kHelp =
    "usage: pillbox submit --redis redis://HOST[:PORT][/DB] --stream NAME INPUT...\n"
    "       pillbox submit --amqp amqp://USER:PASS@HOST[:PORT]/VHOST --queue NAME INPUT...\n"
    "       pillbox submit --kafka HOST:PORT[,HOST:PORT...] --topic NAME [--create-topics] INPUT...\n"
    "\n"
    "Adds one task per input to the fleet's broker. INPUT is a file, a directory (every regular\n"
    "file below it, in order) or - for JSON lines on stdin ({\"key\": ..., \"payload\": ...} or\n"
    "\"payload_b64\"), exactly as `pillbox run` reads them.\n"
    "\n"
    "Redis: one entry per task in the stream NAME, with the fields `key` and `payload` (the\n"
    "payload's exact bytes).\n"
    "RabbitMQ: one persistent message per task in the queue NAME: the body is the payload's exact\n"
    "bytes, the header `key` the task's key, the message_id unique (pillbox-<submit>-<n>). Each\n"
    "is confirmed by the broker before it counts (publisher confirms). A queue that does not\n"
    "exist is declared as the workers want it (a quorum queue with a delivery limit, dead letters\n"
    "to NAME.dlx and the stream queue NAME.dlq); one that exists is left as it is.\n"
    "Kafka: one record per task in the topic NAME: the key is the task's key, the value the\n"
    "payload's exact bytes, the header pillbox-submit names this submit. An idempotent producer,\n"
    "acks=all: each record is acknowledged by every in-sync replica before it counts, none is\n"
    "written twice; keys go to partitions as the Java clients put them (murmur2). The ids are\n"
    "PARTITION:OFFSET. A topic that does not exist is an error that says how to create it, unless\n"
    "--create-topics is given; pillbox never lets a topic be created by naming it.\n"
    "\n"
    "options:\n"
    "  --redis URL         the Redis server (redis://HOST[:PORT][/DB]; port 6379 and database 0 by default)\n"
    "  --stream NAME       the stream the workers read\n"
    "  --amqp URL          the RabbitMQ broker (amqp://USER:PASS@HOST[:PORT]/VHOST; port 5672; the vhost\n"
    "                      \"/\" is written %2f)\n"
    "  --queue NAME        the queue the workers consume\n"
    "  --kafka BROKERS     the Kafka cluster: HOST:PORT of one or more brokers, separated by commas\n"
    "                      (no spaces). Given up on after 5 s when none answers\n"
    "  --topic NAME        the topic the workers read\n"
    "  --create-topics     create the topic when it does not exist (Admin CreateTopics)\n"
    "  --partitions N      with --create-topics: its partitions (default 6: as many workers of a\n"
    "                      group as can work at once)\n"
    "  --replication-factor R  with --create-topics: its replicas (default: the broker's\n"
    "                      default.replication.factor)\n"
    "  --max-payload SIZE  larger payloads are not added (an input error; default 512M on Redis, its\n"
    "                      limit; 128M on RabbitMQ, its default max_message_size; 1000000 bytes on\n"
    "                      Kafka, whose brokers take at most 1048588 by default, key and framing\n"
    "                      included: raise it only with the topic's max.message.bytes)\n"
    "  --follow-symlinks   in directories, read what symlinks point to (regular files only; anywhere)\n"
    "  --quiet             no summary on stderr\n"
    "\n"
    "exit codes: 0 all added, 1 some inputs could not be read (the rest were added), 2 usage\n"
    "error (a missing Kafka topic too), 3 the broker cannot be reached or refused a task (the\n"
    "summary says how many went in)\n";

int fail(const std::string& message, int code) { return command_error("submit", message, code); }

// --kafka BROKERS --topic NAME [--create-topics [--partitions N]
// [--replication-factor R]]: usage errors say what is wrong.
Expected<broker::KafkaPublisherSettings> read_kafka_publisher(const Args& args, const Status& then) {
  const auto usage = [](const std::string& message) { return Error::usage(message); };
  broker::KafkaPublisherSettings settings;
  settings.create_topic = args.flag("create-topics");
  if (!settings.create_topic) {
    for (const char* with : {"partitions", "replication-factor"}) {
      if (args.value(with)) return usage(std::string("--") + with + " goes with --create-topics");
    }
  }
  if (auto s = read_whole_number(args, "partitions", 1, 100000, settings.partitions); !s) return usage(s.message());
  if (auto s = read_whole_number(args, "replication-factor", 1, 32767, settings.replication_factor); !s) {
    return usage(s.message());
  }
  auto target = read_kafka_target(args, then);
  if (!target) return Error{target.error(), target.error_code()};
  settings.bootstrap = std::move(target->bootstrap);
  settings.topic = std::move(target->topic);
  return settings;
}

}  // namespace

int submit_command(int argc, char** argv) {
  const std::vector<OptionSpec> options = {{"redis"},         {"stream"},
                                           {"amqp"},          {"queue"},
                                           {"kafka"},         {"topic"},
                                           {"create-topics", false}, {"partitions"},
                                           {"replication-factor"}, {"max-payload"},
                                           {"follow-symlinks", false}, {"quiet", false},
                                           {"help", false}};
  int exit_code = kExitOk;
  auto args = parse_command(argc, argv, 2, options, "submit", kHelp, exit_code);
  if (!args) return exit_code;
  const Status no_inputs = args->positional().empty()
                               ? Status::error("no inputs: name files, directories or - (JSON lines on stdin)")
                               : Status::ok();
  const bool on_amqp = args->value("amqp").has_value();
  const bool on_kafka = args->value("kafka").has_value();
  if (!on_amqp && !on_kafka && !args->value("redis") && args->value("queue")) {
    return fail("--queue NAME goes with --amqp URL (RabbitMQ); on Redis, give --stream NAME", kExitUsage);
  }
  if (!on_kafka) {
    for (const char* kafka_only : {"topic", "create-topics", "partitions", "replication-factor"}) {
      if (args->value(kafka_only) || args->flag(kafka_only)) {
        return fail(std::string("--") + kafka_only + " goes with --kafka BROKERS (Kafka)", kExitUsage);
      }
    }
  }
  std::optional<FleetTarget> redis_target;
  std::optional<AmqpTarget> amqp_target;
  std::optional<broker::KafkaPublisherSettings> kafka_target;
  if (on_kafka) {
    auto target = read_kafka_publisher(*args, no_inputs);
    if (!target) return fail(target.error(), exit_code_for(target.error_code()));
    kafka_target = std::move(*target);
  } else if (on_amqp) {
    auto target = read_amqp_target(*args, no_inputs);
    if (!target) return fail(target.error(), exit_code_for(target.error_code()));
    amqp_target = std::move(*target);
  } else {
    auto target = read_fleet_target(*args, "--stream NAME is required", no_inputs);
    if (!target) {
      if (!args->value("redis")) {
        return fail("--redis URL --stream NAME (Redis), --amqp URL --queue NAME (RabbitMQ) or --kafka BROKERS "
                    "--topic NAME (Kafka) is required",
                    kExitUsage);
      }
      return fail(target.error(), exit_code_for(target.error_code()));
    }
    redis_target = std::move(*target);
  }
  auto max_payload = read_size(*args, "max-payload");
  if (!max_payload) return fail(max_payload.error(), kExitUsage);
  auto source = open_inputs(args->positional(), STDIN_FILENO, read_symlinks_in_tree(*args));
  if (!source) return fail(source.error(), kExitUsage);
  const bool quiet = args->flag("quiet");

  // The broker, and where its tasks go ("stream NAME on redis://...",
  // "queue NAME on amqp://..." or "topic NAME on kafka HOST:PORT,...").
  std::optional<broker::RedisConnection> redis;
  std::optional<broker::AmqpConnection> amqp;
  std::unique_ptr<broker::TaskPublisher> publisher;
  std::string where;
  std::size_t default_max_payload = 0;
  if (redis_target) {
    auto connection = broker::RedisConnection::open(redis_target->address);
    if (!connection) return fail(connection.error(), exit_code_for(connection.error_code()));
    redis = std::move(*connection);
    publisher = std::make_unique<broker::StreamPublisher>(*redis, redis_target->stream);
    where = table_cell(redis_target->stream, 200) + " on " + redis_target->address.describe();
    default_max_payload = broker::kDefaultMaxStreamPayload;
  } else if (kafka_target) {
    if (max_payload->has_value()) kafka_target->max_payload = static_cast<std::size_t>(**max_payload);
    bool created = false;
    auto opened = broker::KafkaPublisher::open(*kafka_target, created);
    if (!opened) return fail(opened.error(), exit_code_for(opened.error_code()));
    where = "topic " + kafka_target->topic + " on Kafka " + kafka_target->bootstrap.joined();
    default_max_payload = broker::kDefaultMaxKafkaPayload;
    if (created && !quiet) {
      std::fprintf(stderr, "pillbox submit: created %s (%d partitions)\n", where.c_str(), (*opened)->partitions());
    }
    publisher = std::move(*opened);
  } else {
    auto connection = broker::AmqpConnection::open(amqp_target->address);
    if (!connection) return fail(connection.error(), kExitSetup);
    amqp = std::move(*connection);
    std::optional<broker::AmqpTopology> declared;
    auto opened = broker::AmqpPublisher::open(*amqp, amqp_target->queue, declared);
    if (!opened) return fail(opened.error(), exit_code_for(opened.error_code()));
    publisher = std::make_unique<broker::AmqpPublisher>(std::move(*opened));
    where = "queue " + table_cell(amqp_target->queue, 200) + " on " + amqp_target->address.describe();
    default_max_payload = broker::kDefaultMaxAmqpPayload;
    if (declared && !quiet) {
      std::fprintf(stderr, "pillbox submit: declared %s (a quorum queue; dead letters to %s and %s)\n", where.c_str(),
                   table_cell(declared->names.dlx, 200).c_str(), table_cell(declared->names.dlq, 200).c_str());
    }
  }

  auto report = broker::submit_tasks(*publisher, **source, [](const std::string& error) {
    std::fprintf(stderr, "pillbox submit: %s\n", table_cell(error, 2000).c_str());
  }, static_cast<std::size_t>(max_payload->value_or(default_max_payload)));
  if (!report) return fail(report.error(), kExitSetup);
  if (!quiet) {
    const char* ids = redis_target ? "entries" : kafka_target ? "records (partition:offset)" : "message ids";
    std::fprintf(stderr, "pillbox submit: %zu task%s added to %s%s%s\n", report->submitted,
                 report->submitted == 1 ? "" : "s", where.c_str(),
                 report->submitted > 0
                     ? (" (" + std::string(ids) + " " + report->first_id + " to " + report->last_id + ")").c_str()
                     : "",
                 report->input_errors > 0
                     ? ("; " + std::to_string(report->input_errors) + " inputs could not be read").c_str()
                     : "");
  }
  return report->input_errors > 0 ? kExitFailures : kExitOk;
}

}  // namespace pillbox::cli
