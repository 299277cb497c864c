#include "supervisor/cli/fleet_key_option.h"

#include <cstdlib>

#include "supervisor/broker/amqp_topology.h"

namespace pillbox::cli {

Expected<FleetTarget> read_fleet_target(const Args& args, const std::string& no_stream, const Status& then) {
  const auto usage = [](const std::string& message) { return Error{message, ErrorCode::kUsage}; };
  const auto url = args.value("redis");
  if (!url) return usage("--redis URL is required (e.g. --redis redis://127.0.0.1:6379)");
  if (args.value("store")) return usage("give --store DIR or --redis URL --stream NAME, not both");
  const auto stream = args.value("stream");
  if (!stream || stream->empty()) return usage(no_stream);
  if (!then) return usage(then.message());
  auto address = broker::parse_redis_url(*url);
  if (!address) return Error{address.error(), address.error_code()};
  return FleetTarget{std::move(*address), *stream};
}

Expected<AmqpTarget> read_amqp_target(const Args& args, const Status& then) {
  const auto usage = [](const std::string& message) { return Error{message, ErrorCode::kUsage}; };
  const auto url = args.value("amqp");
  if (!url) return usage("--amqp URL is required (e.g. --amqp amqp://guest:guest@127.0.0.1:5672/%2f)");
  for (const char* other : {"store", "redis", "stream"}) {
    if (args.value(other)) {
      return usage(std::string("--") + other + " does not go with --amqp: give --amqp URL --queue NAME (RabbitMQ), "
                   "--redis URL --stream NAME (Redis) or --store DIR");
    }
  }
  const auto queue = args.value("queue");
  if (!queue || queue->empty()) return usage("--amqp needs --queue NAME (the work queue)");
  if (auto named = broker::check_queue_name(*queue); !named) return usage(named.message());
  if (!then) return usage(then.message());
  auto address = broker::parse_amqp_url(*url);
  if (!address) return Error{address.error(), address.error_code()};
  if (const char* env = std::getenv(broker::kAmqpPasswordEnv); !address->password_in_url && env != nullptr) {
    address->password = env;
  }
  return AmqpTarget{std::move(*address), *queue};
}

Expected<KafkaTarget> read_kafka_target(const Args& args, const Status& then) {
  const auto usage = [](const std::string& message) { return Error::usage(message); };
  for (const char* other : {"store", "redis", "stream", "amqp", "queue"}) {
    if (args.value(other)) {
      return usage(std::string("--") + other + " does not go with --kafka: give --kafka BROKERS --topic NAME (Kafka), "
                   "--amqp URL --queue NAME (RabbitMQ), --redis URL --stream NAME (Redis) or --store DIR");
    }
  }
  const auto topic = args.value("topic");
  if (!topic) return usage("--kafka needs --topic NAME (the topic the workers read)");
  if (auto s = broker::check_kafka_topic_name(*topic); !s) return usage(s.message());
  if (!then) return usage(then.message());
  auto bootstrap = broker::parse_kafka_bootstrap(*args.value("kafka"));
  if (!bootstrap) return Error{bootstrap.error(), bootstrap.error_code()};
  return KafkaTarget{std::move(*bootstrap), *topic};
}

const std::vector<OptionSpec> kFleetKeyOptions = {{"fleet-key"}, {"trust-unsigned", false}};

Expected<std::optional<broker::FleetKey>> read_fleet_key(const Args& args) {
  if (!args.value("redis") && !args.value("amqp") && !args.value("kafka")) {
    for (const char* name : {"fleet-key", "trust-unsigned"}) {
      if (args.flag(name)) {
        return Error{std::string("--") + name +
                     " goes with --redis URL, --amqp URL or --kafka BROKERS (the fleet's dead letters)"};
      }
    }
    return std::optional<broker::FleetKey>();
  }
  std::string path;
  if (auto flag = args.value("fleet-key")) {
    path = *flag;
  } else if (const char* env = std::getenv("PILLBOX_FLEET_KEY"); env != nullptr && *env != '\0') {
    path = env;
  } else {
    return std::optional<broker::FleetKey>();
  }
  auto key = broker::FleetKey::load(path);
  if (!key) return Error{key.error()};
  return std::optional<broker::FleetKey>(std::move(*key));
}

}  // namespace pillbox::cli
