#pragma once
// Discarding a record of the fleet's quarantine (fleet_quarantine.h): its
// state set to discarded with an audit entry. One call for `pillbox
// quarantine discard --redis` and `pillbox serve --redis`'s
// POST /api/records/ID/discard, so both leave the same trail (the store's
// counterpart: supervisor/ops/record_discard.h).
#include <string>

#include "shared/status.h"
#include "supervisor/broker/fleet_quarantine.h"

namespace pillbox::broker {

// A usage error (kUsage) when `record` may not be discarded now: a replay
// holds its redrive lock.
Status check_fleet_discardable(const FleetRecord& record);

struct FleetDiscarded {
  bool already = false;  // it was discarded before: left as it was
  std::string was;       // its status before
};

// Sets record `id` to discarded with an audit entry ("discarded", by
// `actor`, detail "REASON (was STATUS)"), atomically; refused (kUsage) when a
// replay took its lock in between.
Expected<FleetDiscarded> discard_fleet_record(FleetQuarantine& fleet, const std::string& id, const std::string& actor,
                                              const std::string& reason);

}  // namespace pillbox::broker
