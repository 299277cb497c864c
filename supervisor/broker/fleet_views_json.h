#pragma once
// The JSON objects of the fleet's records (fleet_quarantine.h) that its
// QuarantineSource (fleet_quarantine_source.h) gives `quarantine show --json
// --redis` and `pillbox serve --redis`, on the store's builders
// (supervisor/ops/quarantine_views_json.h), so a fleet record and a store
// record have the same fields.
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "supervisor/broker/fleet_quarantine.h"
#include "supervisor/broker/fleet_record.h"
#include "supervisor/store/quarantine_store.h"

namespace pillbox::broker {

// "attempt_history": its deliveries, then its redrives, numbered on from
// them as the store numbers a replay's attempt after the task's.
nlohmann::json fleet_attempt_history(const FleetRecord& record);

// "audit": the worker's dead-lettering first (the store's first audit entry
// is the quarantine too), then what operators did.
std::vector<store::AuditEntry> fleet_audit_trail(const FleetRecord& record);

// full_record_json of the record (show --json without the payload's head,
// export --bundle's record.json), with what only a dead letter has:
// "stream" {name, group, entry, deliveries} and "reason"; "state_error"
// when its state or lock cannot be read (FleetRecord::unreadable_state).
nlohmann::json fleet_full_record_json(const FleetQuarantine& fleet, const FleetRecord& record);

// Where the records are: list --json's "store" (fleet_location).
std::string fleet_where(const FleetQuarantine& fleet);

}  // namespace pillbox::broker
