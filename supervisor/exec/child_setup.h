#pragma once
// Building the ChildConfig a task runs under, the same way for `pillbox run`
// (from the command line) and for reproduce, minimize and replay (from what a
// record says it ran under).
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "shared/child_config.h"
#include "shared/status.h"
#include "supervisor/exec/record_policy.h"
#include "supervisor/store/quarantine_store.h"

namespace pillbox {

// argv[0] of an exec command, resolved like a shell would, made absolute: a
// name with a '/' relative to `base` (an absolute directory), a bare name in
// PATH (whose relative entries are relative to `base` too).
Expected<std::string> resolve_command(const std::string& name, const std::string& base);

// What runs: a handler with arguments, or an exec command (handler "exec").
struct HandlerChoice {
  std::string handler;                       // built-in, plugin:PATH or "exec"
  std::map<std::string, std::string> args;
  std::vector<std::string> exec_argv;        // exec: argv[0] as given (resolved here)
  // exec: the absolute directory the command line's relative paths are
  // relative to and the command runs in (a record's); "": the current one.
  std::string working_dir = {};
};

// A complete config for `choice` under `policy`: argv[0] resolved and
// existing relative paths made absolute against the working directory, the
// payload as a file when an argument holds "{}", the crash library
// preloaded, and, as root, the privilege drop to the policy's user. Errors:
// a working directory that is gone or not a directory, a command not found.
Expected<ChildConfig> make_child_config(const HandlerChoice& choice, Policy policy);

// What a quarantine record ran under, parsed back. The policy is this
// host's (record_policy.h: the record's text is only a claim). Errors say
// which part of the record is unusable and, for the policy, to use --policy.
Expected<HandlerChoice> recorded_handler(const store::QuarantineEntry& entry, const RecordAllowance& allowed = {});
Expected<Policy> recorded_policy(const store::QuarantineEntry& entry, const RecordAllowance& allowed = {});
// Whether `given` (replay's or fuzz's --handler) replaces the record's
// handler, or only says its plugin again (the same plugin:PATH, no --arg):
// then the record's own arguments, patched ones included, still apply.
bool replaces_handler(const store::QuarantineEntry& entry, const std::optional<HandlerChoice>& given);
// The handler and policy a record runs under now: those given (replay under
// a fix, fuzz with another policy), else what it recorded.
Expected<HandlerChoice> handler_or_recorded(const store::QuarantineEntry& entry,
                                            const std::optional<HandlerChoice>& given,
                                            const RecordAllowance& allowed = {});
Expected<Policy> policy_or_recorded(const store::QuarantineEntry& entry, const std::optional<Policy>& given,
                                    const RecordAllowance& allowed = {});
// Both recorded (the policy: `given`, the operator's --policy, when there is
// one), made into a complete config for this host (reproduce, minimize).
Expected<ChildConfig> recorded_child_config(const store::QuarantineEntry& entry,
                                            const std::optional<Policy>& given = std::nullopt,
                                            const RecordAllowance& allowed = {});

}  // namespace pillbox
