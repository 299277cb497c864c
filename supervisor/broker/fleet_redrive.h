#pragma once
// `pillbox quarantine replay --redis URL --stream NAME`: records of the
// fleet's quarantine redriven (put back on NAME for the workers) in batches,
// with the store's replay brakes (supervisor/ops/replay.h). Locks, waiting
// and what an earlier replay left: docs/distributed.md, The fleet's
// quarantine. The workers must write NAME:results (with --no-results an ok
// redrive is never seen and times out).
#include <string>
#include <vector>

#include "shared/status.h"
#include "supervisor/broker/fleet_quarantine.h"
#include "supervisor/ops/quarantine_source.h"

namespace pillbox::broker {

// The records a replay would redrive, oldest first, without redriving
// anything (--dry-run); `skipped` says which given ones it leaves and why.
Expected<std::vector<FleetRecord>> redrive_plan(FleetQuarantine& quarantine, const ReplayRun& run,
                                                std::vector<std::string>& skipped);

// Errors: an unknown id (usage), Redis failed (setup). A stop signal
// (SIGINT/SIGTERM) is not an error: stop_signal says which. Its result
// never counts `recovered`.
Expected<ReplayResult> redrive(FleetQuarantine& quarantine, const ReplayRun& run);

}  // namespace pillbox::broker
