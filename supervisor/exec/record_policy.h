#pragma once
// The policy a quarantine record runs under on this machine (reproduce,
// minimize, replay, fuzz, the console, a bundle's reproduce.sh).
// A record's policy text is a claim, never an instruction: what runs is the
// shipped policy it derives from once `run`'s flags are set aside. Lower
// limits are taken; higher limits and host paths only when the operator
// says them again (RecordAllowance); anything else is refused, pointing to
// --policy. See docs/security.md, 1.5 What a record may and may not decide.
#include <cstdint>
#include <string>
#include <vector>

#include "shared/policy.h"
#include "shared/status.h"

namespace pillbox {

// What this command line allows a record's policy beyond the shipped one:
// the limits of --timeout, --cpu, --memory, --max-output (0: not given) and
// the paths of --writable and --share.
struct RecordAllowance {
  std::uint64_t wall_ms = 0;
  std::uint64_t cpu_ms = 0;
  std::uint64_t memory_bytes = 0;
  std::uint64_t output_bytes = 0;
  std::vector<std::string> writable;
  std::vector<std::string> shared;
  // --handler: a record's plugin (loaded into pillbox's own processes) runs
  // only when the operator names the same plugin.
  std::string handler;
};

// The settings of `claim` that only a policy file the operator names may
// make, each as "KEY = VALUE": allow_unsafe = yes, user = root, seccomp
// enabled = no, filesystem = host, network = on. Empty when it has none.
std::vector<std::string> settings_no_record_makes(const Policy& claim);

// The policy to run a record under, from its text and recorded identity: a
// shipped policy (origin "builtin:NAME") with the record's limits and paths.
// Errors name what the record asks for and end with how to choose (--policy).
Expected<Policy> policy_for_record(const std::string& claim_text, const std::string& claim_identity,
                                   const RecordAllowance& allowed = {});

// The `pillbox run` flags (one argument each) that make `shipped` into
// `policy` (one of policy_for_record's), for a bundle's reproduce.sh.
std::vector<std::string> run_flags_for(const Policy& shipped, const Policy& policy);

}  // namespace pillbox
