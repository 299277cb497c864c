// The one record that reproduce and minimize act on: in the store (--store
// DIR), or in the fleet's quarantine (--redis URL --stream NAME), opened as
// a QuarantineSource, and allowed to run (its signature, for the fleet's).
#include <string>

#include "supervisor/broker/fleet_quarantine_source.h"
#include "supervisor/cli/commands.h"
#include "supervisor/cli/exit_code.h"
#include "supervisor/cli/fleet_key_option.h"
#include "supervisor/cli/quarantine_verbs.h"

namespace pillbox::cli {
namespace {

Error usage(const std::string& message) { return Error{message, ErrorCode::kUsage}; }

// --redis URL --stream NAME: the quarantine and the record's id there.
Expected<std::string> open_fleet(const Args& args, OpenedRecord& opened) {
  if (args.value("store")) return usage("give --store DIR or --redis URL --stream NAME, not both");
  const auto stream = args.value("stream");
  if (!stream || stream->empty()) return usage("--redis needs --stream NAME");
  if (args.positional().size() != 1) {
    return usage("give exactly one record ID (see: pillbox quarantine list --redis URL --stream NAME)");
  }
  auto id = broker::parse_fleet_id(args.positional()[0]);
  if (!id) return usage(id.error());
  auto address = broker::parse_redis_url(*args.value("redis"));
  if (!address) return Error{address.error(), address.error_code()};
  auto key = read_fleet_key(args);
  if (!key) return usage(key.error());
  auto fleet = broker::FleetQuarantine::open(*address, *stream);
  if (!fleet) return Error{fleet.error(), fleet.error_code()};
  opened.fleet = std::make_unique<broker::FleetQuarantine>(std::move(*fleet));
  opened.fleet->use_key(std::move(*key));
  opened.source = std::make_unique<broker::FleetQuarantineSource>(*opened.fleet);
  return id;
}

// --store DIR (or its default): the store, which must exist, and the id.
Expected<std::string> open_store(const Args& args, OpenedRecord& opened) {
  if (args.value("stream")) return usage("--stream goes with --redis URL (the fleet's quarantine)");
  if (auto key = read_fleet_key(args); !key) return usage(key.error());
  if (args.positional().size() != 1) return usage("give exactly one record ID (see: pillbox quarantine list)");
  auto id = parse_record_id(args.positional()[0]);
  if (!id) return usage(id.error());
  StoreAccessError error;
  opened.store = open_existing_store(args.value("store").value_or(""), error);
  if (!opened.store) return Error{error.message, error.exit_code == kExitUsage ? ErrorCode::kUsage : ErrorCode::kSetup};
  opened.source = std::make_unique<StoreQuarantineSource>(*opened.store->quarantine, opened.store->store.db(),
                                                          opened.store->store.dir());
  return std::to_string(*id);
}

}  // namespace

Expected<OpenedRecord> open_one_record(const Args& args) {
  OpenedRecord opened;
  auto id = args.value("redis") ? open_fleet(args, opened) : open_store(args, opened);
  if (!id) return Error{id.error(), id.error_code()};
  auto record = opened.source->get(*id);
  if (!record) return Error{record.error(), record.error_code()};
  if (auto ok = opened.source->check_runnable(*record, args.flag("trust-unsigned")); !ok) return usage(ok.message());
  opened.record = std::move(*record);
  return opened;
}

}  // namespace pillbox::cli
