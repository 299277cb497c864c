// The one record of the fleet's quarantine that reproduce and minimize act
// on (--redis URL --stream NAME, one record ID): opened, its signature and
// payload checked. (list, show, stats, export and discard are the store's
// verbs on its QuarantineSource: quarantine_records.cpp.)
#include <string>

#include "supervisor/cli/fleet_key_option.h"
#include "supervisor/cli/quarantine_verbs.h"

namespace pillbox::cli {

Expected<OpenedFleetRecord> open_fleet_record(const Args& args) {
  auto usage = [](const std::string& m) { return Error{m, ErrorCode::kUsage}; };
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
  fleet->use_key(std::move(*key));
  auto record = fleet->get(*id);
  if (!record) return Error{record.error(), record.error_code()};
  if (auto ok = broker::check_signed(*record, args.flag("trust-unsigned")); !ok) return usage(ok.message());
  auto payload = broker::checked_payload(*record);
  if (!payload) return Error{payload.error(), ErrorCode::kSetup};
  return OpenedFleetRecord{*id, *stream, std::move(*fleet), std::move(*record), std::move(*payload)};
}

}  // namespace pillbox::cli
