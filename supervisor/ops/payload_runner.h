#pragma once
// Running payloads again, in the sandbox, for the operator commands
// (reproduce, minimize, replay): a planner chooses each next payload from
// the outcomes so far, and all of it runs in one dispatcher (one zygote), up
// to `jobs` at once. Nothing here touches the store; the callers record.
#include <chrono>
#include <optional>

#include "shared/status.h"
#include "supervisor/exec/dispatcher.h"
#include "supervisor/exec/stop_signals.h"

namespace pillbox {

class PayloadPlanner {
 public:
  virtual ~PayloadPlanner() = default;
  // The next payload to run; nullopt when there is none right now. The run
  // ends when there is none and nothing is in flight.
  virtual std::optional<Task> next() = 0;
  // The outcome of a payload handed out by next(), in completion order.
  virtual void on_outcome(const Task& task, const Outcome& outcome) = 0;
  // When next() returned nothing only because it is too early (a rate
  // limit): when to ask again. The run does not end while this is set.
  virtual std::optional<std::chrono::steady_clock::time_point> not_before() const { return std::nullopt; }
};

struct PlannedRunReport {
  RunReport run;
  int stop_signal = 0;  // SIGINT/SIGTERM ended it early (tasks in flight were killed, their outcomes not told)
};

// What every planned run is given: `config` in `mode`, `jobs` at once (at
// least one), `sandbox_binary` ("" for the one installed beside pillbox).
RunSettings planned_run_settings(ChildConfig config, LaunchMode mode, std::size_t jobs,
                                 const std::string& sandbox_binary);

// Errors: the sandbox could not start. A stop signal is not an error.
Expected<PlannedRunReport> run_planned(const RunSettings& settings, PayloadPlanner& planner);

}  // namespace pillbox
