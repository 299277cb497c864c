#include "supervisor/cli/quarantine_open.h"

#include <string>

#include "supervisor/broker/amqp_quarantine.h"
#include "supervisor/broker/fleet_quarantine.h"
#include "supervisor/broker/fleet_quarantine_source.h"
#include "supervisor/broker/kafka_fleet_record.h"
#include "supervisor/broker/kafka_quarantine.h"
#include "supervisor/cli/fleet_key_option.h"
#include "supervisor/cli/quarantine_verbs.h"

namespace pillbox::cli {
namespace {

// The record ID, the one positional, in the back end's form; errors name
// where the ids are listed.
Expected<std::string> read_record_id(const Args& args) {
  const bool on_redis = args.value("redis").has_value();
  const bool on_amqp = args.value("amqp").has_value();
  const bool on_kafka = args.value("kafka").has_value();
  if (args.positional().size() != 1) {
    return Error{std::string("give exactly one record ID (see: pillbox quarantine list") +
                 (on_redis  ? " --redis URL --stream NAME)"
                  : on_amqp ? " --amqp URL --queue NAME)"
                  : on_kafka ? " --kafka BROKERS --topic NAME)"
                             : ")")};
  }
  if (on_redis) return broker::parse_fleet_id(args.positional()[0]);
  if (on_amqp) return broker::parse_amqp_record_id(args.positional()[0]);
  if (on_kafka) return broker::parse_kafka_record_id(args.positional()[0]);
  auto id = parse_record_id(args.positional()[0]);
  if (!id) return Error{id.error()};
  return std::to_string(*id);
}

// A broker's dead letters, opened with the fleet's key, as the verbs' source.
template <class DeadLetters>
Expected<OpenedQuarantine> fleet_source(Expected<DeadLetters> dead_letters, std::optional<broker::FleetKey> key) {
  if (!dead_letters) return Error{dead_letters.error(), dead_letters.error_code()};
  OpenedQuarantine opened;
  opened.fleet = std::make_unique<DeadLetters>(std::move(*dead_letters));
  opened.fleet->use_key(std::move(key));
  opened.source = std::make_unique<broker::FleetQuarantineSource>(*opened.fleet);
  return opened;
}

}  // namespace

QuarantineCapabilities capabilities_of(const Args& args) {
  if (args.value("amqp")) return broker::AmqpQuarantine::kCapabilities;
  if (args.value("kafka")) return broker::KafkaQuarantine::kCapabilities;
  return args.value("redis") ? broker::FleetQuarantine::kCapabilities : StoreQuarantineSource::kCapabilities;
}

Expected<OpenedQuarantine> open_quarantine(const Args& args, const std::string& no_stream, bool create_store,
                                           const Status& then) {
  if (args.value("amqp")) {
    auto target = read_amqp_target(args, then);
    if (!target) return Error{target.error(), target.error_code()};
    auto key = read_fleet_key(args);
    if (!key) return Error::usage(key.error());
    return fleet_source(broker::AmqpQuarantine::open(target->address, target->queue), std::move(*key));
  }
  if (args.value("kafka")) {
    auto target = read_kafka_target(args, then);
    if (!target) return Error{target.error(), target.error_code()};
    auto key = read_fleet_key(args);
    if (!key) return Error::usage(key.error());
    return fleet_source(broker::KafkaQuarantine::open(target->bootstrap, target->topic), std::move(*key));
  }
  if (args.value("redis")) {
    auto target = read_fleet_target(args, no_stream, then);
    if (!target) return Error{target.error(), target.error_code()};
    auto key = read_fleet_key(args);
    if (!key) return Error::usage(key.error());
    return fleet_source(broker::FleetQuarantine::open(target->address, target->stream), std::move(*key));
  }
  // --batch-timeout is replay's on the fleet only.
  for (const char* fleet_only : {"stream", "batch-timeout"}) {
    if (args.value(fleet_only)) {
      return Error::usage(std::string("--") + fleet_only + " goes with --redis URL (the fleet's quarantine)");
    }
  }
  if (args.value("queue")) return Error::usage("--queue goes with --amqp URL (the fleet's quarantine on RabbitMQ)");
  if (args.value("topic")) return Error::usage("--topic goes with --kafka BROKERS (the fleet's quarantine on Kafka)");
  if (auto key = read_fleet_key(args); !key) return Error::usage(key.error());
  if (!then) return Error::usage(then.message());
  auto store = create_store ? open_or_create_store(args) : open_existing_store(args);
  if (!store) return Error{store.error(), store.error_code()};
  OpenedQuarantine opened;
  opened.store = std::move(*store);
  opened.source = std::make_unique<StoreQuarantineSource>(*opened.store->quarantine, opened.store->store.db(),
                                                          opened.store->store.dir());
  return opened;
}

Expected<OpenedRecord> open_one_record(const Args& args) {
  auto id = read_record_id(args);
  auto opened = open_quarantine(args, "--redis needs --stream NAME", false, id.status());
  if (!opened) return Error{opened.error(), opened.error_code()};
  auto record = opened->source->get(*id);
  if (!record) return Error{record.error(), record.error_code()};
  if (auto ok = opened->source->check_runnable(*record, args.flag("trust-unsigned")); !ok) return Error::usage(ok.message());
  return OpenedRecord{std::move(*opened), std::move(*record)};
}

}  // namespace pillbox::cli
