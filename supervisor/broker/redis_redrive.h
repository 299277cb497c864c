#pragma once
// `pillbox quarantine replay --redis URL --stream NAME`: the fleet's replay
// (fleet_redrive.h) on Redis. A redrive is an entry added to NAME with
// fields key, payload and redrive_of (the record's entry id), by a script
// that also takes the record's lock (NAME:dlq:lock:ID, a lease the replay
// renews) and writes its state in one step; its outcome is an entry of
// NAME:results or NAME:dlq that names it (fields entry and redrive_of). The
// workers must write NAME:results (with --no-results an ok redrive is never
// seen and times out).
#include <memory>

#include "supervisor/broker/fleet_quarantine.h"
#include "supervisor/broker/fleet_redrive.h"

namespace pillbox::broker {

// Redis's part of a replay by `run` (which outlives it).
std::unique_ptr<RedriveRoute> redis_redrive_route(FleetQuarantine& quarantine, const ReplayRun& run);

}  // namespace pillbox::broker
