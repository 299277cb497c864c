#pragma once
// Building the ChildConfig a task runs under, the same way for `pillbox run`
// and for the commands that run a quarantined payload again (reproduce,
// minimize, replay): from the command line, or from what a record says it ran
// under (its handler, arguments or exec argv, and full policy text).
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
  // exec: the absolute directory the command line was typed in, which its
  // relative paths name files of and the command runs in (a record's); ""
  // for this process's current directory (`run`).
  std::string working_dir = {};
};

// A complete config for `choice` under `policy`: exec argv[0] resolved and
// arguments naming existing files made absolute (both against the working
// directory, which the config keeps), the payload passed as a file when an
// argument holds "{}", the crash library preloaded, and privileges dropped
// to the policy's user when run as root. Errors: a recorded working
// directory that is not an existing directory here, a current directory
// that is gone, a command not found.
Expected<ChildConfig> make_child_config(const HandlerChoice& choice, Policy policy);

// What a quarantine record ran under, parsed back: its handler or command,
// and the policy of this machine it runs under (record_policy.h: the
// record's policy text is a claim; a shipped policy with its limits and
// paths runs, or nothing). Errors say which part of the record is unusable
// and, for the policy, how to choose one (--policy).
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
