#pragma once
// --fleet-key FILE (else $PILLBOX_FLEET_KEY) and --trust-unsigned: the one
// reader of both, for the worker (which signs), the quarantine verbs,
// reproduce, minimize and serve on --redis (which check;
// supervisor/broker/fleet_key.h).
#include <optional>
#include <vector>

#include "shared/status.h"
#include "supervisor/broker/fleet_key.h"
#include "supervisor/cli/args.h"

namespace pillbox::cli {

// The options, for a command's OptionSpec list.
extern const std::vector<OptionSpec> kFleetKeyOptions;

// The fleet's key, or none when neither the flag nor the variable names one.
// Errors (usage): the file is unusable (fleet_key.h says why), or
// --fleet-key/--trust-unsigned without --redis.
Expected<std::optional<broker::FleetKey>> read_fleet_key(const Args& args);

}  // namespace pillbox::cli
