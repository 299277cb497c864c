#pragma once
// Where `pillbox minimize` keeps its progress and result for a record of
// the fleet's quarantine on Redis (fleet_quarantine.h), as the store keeps
// them: the search's progress in the record's state, the best payload so
// far under keys().minimizing(id), the result under keys().minimized(id)
// with its sha256 and an audit entry in the state.
#include <memory>
#include <string>

#include "supervisor/ops/minimize.h"

namespace pillbox::broker {

class FleetQuarantine;

// `quarantine` outlives the keeper.
std::unique_ptr<MinimizeKeeper> fleet_minimize_keeper(FleetQuarantine& quarantine, std::string id, std::string actor);

}  // namespace pillbox::broker
