#pragma once
// The one reader of the fleet's options: --redis URL --stream NAME (or, on
// RabbitMQ, --amqp URL --queue NAME; on Kafka, --kafka BROKERS --topic T), and
// --fleet-key FILE (else $PILLBOX_FLEET_KEY) with --trust-unsigned, for the
// worker, which signs, and the commands that check signatures
// (supervisor/broker/fleet_key.h).
#include <optional>
#include <string>
#include <vector>

#include "shared/status.h"
#include "supervisor/broker/amqp_connection.h"
#include "supervisor/broker/fleet_key.h"
#include "supervisor/broker/kafka_config.h"
#include "supervisor/broker/redis_connection.h"
#include "supervisor/cli/args.h"

namespace pillbox::cli {

struct FleetTarget {
  broker::RedisAddress address;
  std::string stream;
};

// --redis URL --stream NAME, both required; --store is refused beside them.
// `no_stream`: the error for a missing stream, in the command's words.
// `then`: a usage error of the command's own, said after those and before
// the URL's (which keep their code). The others are usage errors.
Expected<FleetTarget> read_fleet_target(const Args& args, const std::string& no_stream,
                                        const Status& then = Status::ok());

struct AmqpTarget {
  broker::AmqpAddress address;
  std::string queue;
};

// --amqp URL --queue NAME, both required; --store, --redis and --stream are
// refused beside them (usage errors, as the URL's). A URL without a
// password takes $PILLBOX_AMQP_PASSWORD's (broker::kAmqpPasswordEnv) when
// it is set.
Expected<AmqpTarget> read_amqp_target(const Args& args, const Status& then = Status::ok());

struct KafkaTarget {
  broker::KafkaBootstrap bootstrap;
  std::string topic;  // T: the topic the workers read
};

// --kafka BROKERS --topic T, both required; --store, --redis, --stream,
// --amqp and --queue are refused beside them (usage errors, as the
// bootstrap list's).
Expected<KafkaTarget> read_kafka_target(const Args& args, const Status& then = Status::ok());

// The options, for a command's OptionSpec list.
extern const std::vector<OptionSpec> kFleetKeyOptions;

// The fleet's key, or none when neither the flag nor the variable names one.
// Errors (usage): the file is unusable (fleet_key.h says why), or
// --fleet-key/--trust-unsigned without --redis, --amqp or --kafka.
Expected<std::optional<broker::FleetKey>> read_fleet_key(const Args& args);

}  // namespace pillbox::cli
