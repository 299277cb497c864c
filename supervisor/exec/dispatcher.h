#pragma once
// The dispatcher: runs every task a TaskSource gives in a confined child, up
// to `jobs` at a time, and hands each outcome to the OutcomeSink exactly
// once. It knows nothing of retries, the ledger or the quarantine. See
// docs/architecture.md, 4. Dispatcher.
#include <cstddef>
#include <map>
#include <string>
#include <vector>

#include "shared/child_config.h"
#include "shared/status.h"
#include "supervisor/classify/outcome.h"
#include "supervisor/exec/launcher.h"
#include "supervisor/exec/task_source.h"

namespace pillbox {

struct RunSettings {
  ChildConfig config;
  LaunchMode mode = LaunchMode::kZygote;
  std::string sandbox_binary;    // "" = find_sandbox_binary()
  std::size_t jobs = 1;
  // The handler identity that fingerprints outcomes; "" = handler_identity(config).
  // A record run again gives its own, so it is compared under the identity
  // it was made with.
  std::string identity;
};

class OutcomeSink {
 public:
  virtual ~OutcomeSink() = default;
  virtual void on_outcome(const Task& task, const Outcome& outcome) = 0;
  // An input that could not become a task (unreadable file, bad JSON line).
  virtual void on_input_error(const std::string& message) = 0;
};

struct RunReport {
  std::size_t tasks = 0;
  std::size_t input_errors = 0;
  std::map<Kind, std::size_t> by_kind;
  std::string launcher;                 // "zygote (pid N)" or "spawn per task"
  std::vector<std::string> isolation;   // namespaces entered
  std::vector<std::string> warnings;    // what the host refused, and the fallback
  std::string cgroups;                  // what memory/pids confinement is used
};

// Errors are setup errors (exit code 3): the sandbox could not start at all.
Expected<RunReport> run_tasks(const RunSettings& settings, TaskSource& source, OutcomeSink& sink);

// Identity of the handler for fingerprints: name + arguments, or the exec command.
std::string handler_identity(const ChildConfig& config);

}  // namespace pillbox
