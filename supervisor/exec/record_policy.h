#pragma once
// The policy a quarantine record runs under on this machine: reproduce,
// minimize, replay, fuzz from a record, the console's Reproduce, an exported
// bundle's reproduce.sh.
//
// A record's policy text is a claim, never an instruction. A fleet's dead
// letter is whatever anyone who can write to its Redis put there; an imported
// artifact, a bundle, a store written elsewhere or by another version may say
// anything. So what runs is one of this machine's own shipped policies, the
// one whose identity the record's text has once the changes the command line
// of `pillbox run` can make are set aside: the limits of --timeout, --cpu,
// --memory and --max-output, and the host paths of --writable and --share.
// Of those, the record's lower limits are taken as they are; a limit above
// the shipped one and any host path only when the operator says so again on
// this command line (RecordAllowance): a forged record asking for 24 hours
// of CPU or for the operator's home directory writable gets neither. A
// record that asks for anything else — a
// setting that takes a layer of confinement away (allow_unsafe, user root,
// seccomp off, the host's file system, the network), another allow list,
// another user — is refused, with what it asks for and how to choose the
// policy instead: --policy NAME, or --policy FILE, a file of the operator's
// own, which alone may switch confinement off.
#include <cstdint>
#include <string>
#include <vector>

#include "shared/policy.h"
#include "shared/status.h"

namespace pillbox {

// What this command's line allows a record's policy to ask for beyond the
// shipped policy it derives from: the limits of --timeout, --cpu, --memory
// and --max-output (0: not given) and the paths of --writable and --share.
struct RecordAllowance {
  std::uint64_t wall_ms = 0;
  std::uint64_t cpu_ms = 0;
  std::uint64_t memory_bytes = 0;
  std::uint64_t output_bytes = 0;
  std::vector<std::string> writable;
  std::vector<std::string> shared;
  // --handler, said again: a record whose handler is a plugin (code pillbox
  // loads into its own processes, before the task is confined when it runs
  // without root) runs only when the operator names that same plugin.
  std::string handler;
};

// The settings of `claim` that only a policy file the operator names may
// make, each as "KEY = VALUE": allow_unsafe = yes, user = root, seccomp
// enabled = no, filesystem = host, network = on. Empty when it has none.
std::vector<std::string> settings_no_record_makes(const Policy& claim);

// The policy to run a record under, from its policy text (`claim_text`,
// recorded with identity `claim_identity`): a shipped policy with the
// record's limits and paths, its origin "builtin:NAME". Errors name what the
// record asks for, or its identity and this machine's, and end with how to
// choose (--policy).
Expected<Policy> policy_for_record(const std::string& claim_text, const std::string& claim_identity,
                                   const RecordAllowance& allowed = {});

// The flags of `pillbox run` that make shipped policy `shipped` into `policy`
// (one of policy_for_record's): --timeout, --cpu, --memory, --max-output,
// --writable, --share, each a separate argument. For a bundle's
// reproduce.sh, which names the shipped policy and these instead of
// shipping a policy file.
std::vector<std::string> run_flags_for(const Policy& shipped, const Policy& policy);

}  // namespace pillbox
