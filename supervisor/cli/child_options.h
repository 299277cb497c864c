#pragma once
// The options that say what runs and under which limits, read the same way
// by `run`, `fuzz` and `quarantine import`: --handler/--arg or a command
// after --, --policy, the limit overrides and --mode.
#include <optional>
#include <vector>

#include "shared/child_config.h"
#include "shared/policy.h"
#include "shared/status.h"
#include "supervisor/exec/child_setup.h"
#include "supervisor/cli/args.h"
#include "supervisor/exec/dispatcher.h"
#include "supervisor/exec/launcher.h"

namespace pillbox::cli {

// handler, arg, policy, timeout, cpu, memory, max-output, mode, writable, share.
extern const std::vector<OptionSpec> kChildOptions;

// --handler/--arg or the command after --; nullopt when neither is given.
Expected<std::optional<HandlerChoice>> read_handler_choice(const Args& args);
// --policy NAME|FILE resolved; nullopt when it is not given (the caller has
// a default of its own: a record's policy, the handler's).
Expected<std::optional<Policy>> read_policy_override(const Args& args);

// --timeout, --cpu, --memory, --max-output, --writable, --share as what a
// record's policy may ask for beyond its shipped policy (record_policy.h):
// the operator says it again on the command that runs the record.
Expected<RecordAllowance> read_record_allowance(const Args& args);
// --policy (`policy`, with the flags above applied to it) and the flags as
// `allowed`: the one reader for the commands that run a record (reproduce,
// minimize, quarantine replay).
Status read_record_policy_options(const Args& args, std::optional<Policy>& policy, RecordAllowance& allowed);
// Those flags for such a command (reproduce, minimize), beside --policy.
extern const std::vector<OptionSpec> kRecordAllowanceOptions;
// --timeout, --cpu, --memory and --max-output over `policy`'s limits, and
// --writable PATH and --share PATH (repeatable) added to its read-write and
// read-only host paths.
Status apply_limit_overrides(const Args& args, Policy& policy);
// --NAME SIZE (64K, 16M, 1G), read as the policy reads sizes; nullopt
// when it is not given. The error names the option.
Expected<std::optional<std::uint64_t>> read_size(const Args& args, const std::string& name);
// The whole config: the handler choice (required: the error says how to
// give one), --policy (default: strict for handlers, exec for commands),
// the overrides.
Expected<ChildConfig> read_child_config(const Args& args);
// --mode zygote|spawn (default zygote), into `mode`.
Status read_launch_mode(const Args& args, LaunchMode& mode);
// What runs (a handler, or a command after "--") under which policy, with
// the command line's overrides; how many at once (--jobs) and how they
// start (--mode). For `run` and `worker`.
Expected<RunSettings> read_run_settings(const Args& args);

}  // namespace pillbox::cli
