#pragma once
// What the tasks of a run ran under, as a quarantine record keeps it. Made by
// run_identity() (supervisor/cli/run_job.h).
#include <string>
#include <vector>

namespace pillbox {

struct RunIdentity {
  std::string handler;
  std::string handler_identity;
  std::string handler_args;     // JSON object
  std::string exec_argv;        // JSON array
  std::string policy_identity;
  std::string policy;           // policy text
  std::string working_dir = {}; // exec: where the command ran (absolute); "" for handlers
  // What the scripts the command names held (supervisor/exec/handler_version.h):
  // "" when it names none. Not part of the identity, nor of any fingerprint.
  std::string handler_version = {};
  std::vector<std::string> versioned_scripts = {};  // their names, for messages
};

}  // namespace pillbox
