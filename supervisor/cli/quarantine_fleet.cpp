// pillbox quarantine list / show / stats / export / discard --redis URL
// --stream NAME: the same verbs on the fleet's quarantine (the workers' dead
// letters, supervisor/broker/fleet_quarantine.h), printed by the same
// printers as the store's records (quarantine_print.h). Thin: the library
// reads and changes; this turns its records into what the printers take.
#include <string>

#include "supervisor/broker/fleet_minimize.h"
#include "supervisor/cli/commands.h"
#include "supervisor/cli/exit_code.h"
#include "supervisor/cli/quarantine_print.h"
#include "supervisor/cli/quarantine_verbs.h"
#include "supervisor/store/actor.h"

namespace pillbox::cli {
namespace {

std::string where(const FleetContext& c) { return broker::fleet_location(c.quarantine.address(), c.quarantine.keys()); }

// Its deliveries, then its redrives, numbered on from them as the store
// numbers a replay's attempt after the task's.
nlohmann::json attempt_history(const broker::FleetRecord& r) {
  nlohmann::json history = nlohmann::json::array();
  std::int64_t n = 0;
  for (const auto& a : r.attempts) {
    n = a.n > 0 ? a.n : n + 1;
    history.push_back(attempt_json(n, a.worker, a.ended_at, a.ended_at, a.kind.empty() ? "released" : a.kind,
                                   a.fingerprint, a.message, a.charged, false));
  }
  for (const auto& a : r.state.redrives) {
    history.push_back(attempt_json(++n, a.worker, a.ended_at, a.ended_at, a.kind, a.fingerprint,
                                   "redrive: entry " + a.entry + " -> " + a.outcome_entry +
                                       (a.message.empty() ? "" : ": " + a.message),
                                   a.charged, false));
  }
  return history;
}

// The worker's dead-lettering first (the store's first audit entry is the
// quarantine too), then what operators did.
std::vector<store::AuditEntry> audit_trail(const broker::FleetRecord& r) {
  std::string worker = "a worker";
  if (!r.attempts.empty() && !r.attempts.back().worker.empty()) worker = r.attempts.back().worker;
  std::vector<store::AuditEntry> trail;
  trail.push_back({r.record.created_at, "worker " + worker + (r.group.empty() ? "" : " of group " + r.group),
                   "quarantined",
                   (r.reason.empty() ? std::string("dead-lettered") : r.reason) + " (delivery " +
                       std::to_string(r.deliveries) + " of entry " + r.source_entry + " of " +
                       (r.stream.empty() ? std::string("the stream") : r.stream) + ")"});
  trail.insert(trail.end(), r.state.audit.begin(), r.state.audit.end());
  return trail;
}

nlohmann::json full_record(const FleetContext& c, const broker::FleetRecord& r) {
  nlohmann::json j = full_record_json(r.id, r.record, where(c), attempt_history(r), audit_trail(r));
  // What only a dead letter knows: where it came from and why.
  j["stream"] = {{"name", r.stream}, {"group", r.group}, {"entry", r.source_entry}, {"deliveries", r.deliveries}};
  j["reason"] = r.reason;
  return j;
}

Expected<std::string> one_id(const FleetContext& c) { return broker::parse_fleet_id(c.args.positional()[0]); }

}  // namespace

int fleet_list(const FleetContext& c) {
  auto filter = read_filter(c.args);
  if (!filter) return quarantine_error(filter.error(), kExitUsage);
  ListSource source;
  source.each = [&](const store::ListFilter& f, const ListSource::Visit& visit) {
    return c.quarantine.each(f, [&](const broker::FleetRecord& r) { return visit(r.id, r.record); });
  };
  source.count = [&](const store::ListFilter& f) { return c.quarantine.count(f); };
  source.where = where(c);
  source.id_width = 15;  // "1712345678901-0
  return list_records(c.args, std::move(*filter), source);
}

int fleet_show(const FleetContext& c) {
  auto id = one_id(c);
  if (!id) return quarantine_error(id.error(), kExitUsage);
  auto r = c.quarantine.get(*id);
  if (!r) return quarantine_error(r.error(), exit_code_for(r.error_code()));
  ShownRecord shown{r->id, r->record, full_record(c, *r), broker::checked_payload(*r), std::nullopt,
                    "pillbox reproduce " + r->id + " --redis URL --stream " + c.quarantine.keys().stream.stream};
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
  const bool minimized = c.args.flag("minimized");
  auto payload = minimized ? broker::minimized_payload(c.quarantine, *r) : broker::checked_payload(*r);
  if (!payload) return quarantine_error(payload.error(), exit_code_for(payload.error_code()));
  const nlohmann::json full = c.args.flag("bundle") ? full_record(c, *r) : nlohmann::json();
  return export_record(c.args, r->id, r->record, full, *payload,
                       minimized ? r->record.minimized_sha256 : r->record.entry.payload_sha256);
}

int fleet_discard(const FleetContext& c) {
  const auto reason = c.args.value("reason");
  if (!reason || reason->empty()) return quarantine_error("discard needs --reason TEXT (kept in the audit trail)", kExitUsage);
  if (c.args.positional().empty()) return quarantine_error("discard needs at least one record ID", kExitUsage);
  // All ids are checked before any record changes: a typo changes nothing.
  std::vector<std::string> ids;
  for (const auto& text : c.args.positional()) {
    auto r = c.quarantine.get(text);
    if (!r) return quarantine_error(r.error(), exit_code_for(r.error_code()));
    if (r->replaying) {
      return quarantine_error("record " + text + " is being replayed right now (by " + r->replaying_by +
                                  "); discard it when the replay is over",
                              kExitUsage);
    }
    ids.push_back(r->id);
  }
  const std::string actor = actor_name("quarantine discard");
  DiscardReport report(c.args.flag("json"));
  for (const auto& id : ids) {
    bool already = false;
    std::string was;
    auto r = c.quarantine.change_state(id, true, [&](broker::FleetState& s, const broker::FleetRecord&) {
      was = std::string(to_string(s.status));
      already = s.status == store::RecordStatus::kDiscarded;
      if (already) return Status::ok();  // written back as it is
      s.status = store::RecordStatus::kDiscarded;
      s.updated_at = store::now_ms();
      s.audit.push_back({s.updated_at, actor, "discarded", *reason + " (was " + was + ")"});
      return Status::ok();
    });
    if (!r) return quarantine_error(r.error(), exit_code_for(r.error_code()));
    if (already) {
      report.already_discarded(id);
      continue;
    }
    report.discarded(id, was);
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
  auto fleet = broker::FleetQuarantine::open(*address, *stream);
  if (!fleet) return Error{fleet.error(), fleet.error_code()};
  auto record = fleet->get(*id);
  if (!record) return Error{record.error(), record.error_code()};
  auto payload = broker::checked_payload(*record);
  if (!payload) return Error{payload.error(), ErrorCode::kSetup};
  return OpenedFleetRecord{*id, *stream, std::move(*fleet), std::move(*record), std::move(*payload)};
}

}  // namespace pillbox::cli
