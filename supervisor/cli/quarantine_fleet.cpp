// pillbox quarantine list / show / stats / export / discard --redis URL
// --stream NAME: the same verbs on the fleet's quarantine (the workers' dead
// letters, supervisor/broker/fleet_quarantine.h), printed by the same
// printers as the store's records (quarantine_print.h). Thin: the library
// reads and changes; this turns its records into what the printers take.
#include <string>

#include "supervisor/broker/fleet_discard.h"
#include "supervisor/broker/fleet_minimize.h"
#include "supervisor/broker/fleet_views_json.h"
#include "supervisor/cli/commands.h"
#include "supervisor/cli/exit_code.h"
#include "supervisor/cli/fleet_key_option.h"
#include "supervisor/cli/quarantine_print.h"
#include "supervisor/cli/quarantine_verbs.h"
#include "supervisor/store/actor.h"

namespace pillbox::cli {
namespace {

std::string where(const FleetContext& c) { return broker::fleet_where(c.quarantine); }

Expected<std::string> one_id(const FleetContext& c) { return broker::parse_fleet_id(c.args.positional()[0]); }

}  // namespace

int fleet_list(const FleetContext& c) {
  auto filter = read_filter(c.args);
  if (!filter) return quarantine_error(filter.error(), kExitUsage);
  ListSource source;
  source.each = [&](const store::ListFilter& f, const ListSource::Visit& visit) {
    return c.quarantine.each(f, [&](const broker::FleetRecord& r) { return visit(r.id, r.record, broker::to_string(r.signature)); });
  };
  source.count = [&](const store::ListFilter& f) { return c.quarantine.count(f); };
  source.where = where(c);
  source.id_width = 15;  // "1712345678901-0
  source.signatures = true;
  return list_records(c.args, std::move(*filter), source);
}

int fleet_show(const FleetContext& c) {
  auto id = one_id(c);
  if (!id) return quarantine_error(id.error(), kExitUsage);
  auto r = c.quarantine.get(*id);
  if (!r) return quarantine_error(r.error(), exit_code_for(r.error_code()));
  ShownRecord shown{r->id, r->record, broker::fleet_full_record_json(c.quarantine, *r), broker::checked_payload(*r),
                    std::nullopt, "pillbox reproduce " + r->id + " --redis URL --stream " + c.quarantine.keys().stream.stream};
  if (!r->record.minimized_sha256.empty()) {
    if (auto mini = broker::minimized_payload(c.quarantine, *r)) shown.minimized_size = mini->size();
  }
  return print_record(shown, c.args.flag("json"));
}

int fleet_stats(const FleetContext& c) {
  auto filter = read_filter(c.args);
  if (!filter) return quarantine_error(filter.error(), kExitUsage);
  std::vector<std::string> examples;
  auto groups = c.quarantine.stats(*filter, examples);
  if (!groups) return quarantine_error(groups.error(), exit_code_for(groups.error_code()));
  return print_stats(*groups, std::vector<nlohmann::json>(examples.begin(), examples.end()), c.args.flag("json"));
}

int fleet_export(const FleetContext& c) {
  auto id = one_id(c);
  if (!id) return quarantine_error(id.error(), kExitUsage);
  if (auto s = check_export_options(c.args); !s) return quarantine_error(s.message(), kExitUsage);
  auto r = c.quarantine.get(*id);
  if (!r) return quarantine_error(r.error(), exit_code_for(r.error_code()));
  // A bundle's reproduce.sh runs what the record names: only a signed one.
  if (c.args.flag("bundle")) {
    if (auto ok = broker::check_signed(*r, c.args.flag("trust-unsigned")); !ok) {
      return quarantine_error(ok.message(), kExitUsage);
    }
  }
  const bool minimized = c.args.flag("minimized");
  auto payload = minimized ? broker::minimized_payload(c.quarantine, *r) : broker::checked_payload(*r);
  if (!payload) return quarantine_error(payload.error(), exit_code_for(payload.error_code()));
  const nlohmann::json full =
      c.args.flag("bundle") ? broker::fleet_full_record_json(c.quarantine, *r) : nlohmann::json();
  return export_record(c.args, r->id, r->record, full, *payload,
                       minimized ? r->record.minimized_sha256 : r->record.entry.payload_sha256);
}

int fleet_discard(const FleetContext& c) {
  if (c.args.value("raise-site")) {
    return quarantine_error("discard --raise-site works on the store's quarantine; on the fleet's, name the records "
                            "(quarantine list --raise-site S --redis URL --stream NAME shows them)",
                            kExitUsage);
  }
  const auto reason = c.args.value("reason");
  if (!reason || reason->empty()) return quarantine_error("discard needs --reason TEXT (kept in the audit trail)", kExitUsage);
  if (c.args.positional().empty()) return quarantine_error("discard needs at least one record ID", kExitUsage);
  // All ids are checked before any record changes: a typo changes nothing.
  std::vector<std::string> ids;
  for (const auto& text : c.args.positional()) {
    auto r = c.quarantine.get(text);
    if (!r) return quarantine_error(r.error(), exit_code_for(r.error_code()));
    if (auto ok = broker::check_fleet_discardable(*r); !ok) return quarantine_error(ok.message(), kExitUsage);
    ids.push_back(r->id);
  }
  const std::string actor = actor_name("quarantine discard");
  DiscardReport report(c.args.flag("json"));
  for (const auto& id : ids) {
    auto r = broker::discard_fleet_record(c.quarantine, id, actor, *reason);
    if (!r) return quarantine_error(r.error(), exit_code_for(r.error_code()));
    if (r->already) {
      report.already_discarded(id);
      continue;
    }
    report.discarded(id, r->was);
  }
  report.finish();
  return kExitOk;
}

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
