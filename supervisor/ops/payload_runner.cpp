#include "supervisor/ops/payload_runner.h"

#include <algorithm>
#include <string>
#include <utility>

#include "supervisor/exec/install_paths.h"

namespace pillbox {
namespace {

// The dispatcher's view of a planner: tasks while it has some, "wait" while
// outcomes that may bring more are in flight, the end otherwise.
class PlannerAdapter final : public TaskSource, public OutcomeSink {
 public:
  explicit PlannerAdapter(PayloadPlanner& planner)
      : planner_(planner) {}

  Status prepare(std::size_t) override {
    if (const int sig = signals_.caught(); sig != 0) {
      stop_signal_ = sig;
      return Status::error(std::string("interrupted by ") + stop_signal_name(sig));
    }
    return Status::ok();
  }

  Item next() override {
    Item item;
    if (auto task = planner_.next()) {
      ++in_flight_;
      item.type = Item::Type::kTask;
      item.task = std::move(*task);
      return item;
    }
    if (auto when = planner_.not_before()) {
      // Too early (a rate limit): the dispatcher asks again then.
      item.type = Item::Type::kWait;
      item.wake_at = *when;
      return item;
    }
    // Never "wait" with nothing in flight: nothing would wake the dispatcher.
    item.type = in_flight_ > 0 ? Item::Type::kWait : Item::Type::kEnd;
    return item;
  }

  void on_outcome(const Task& task, const Outcome& outcome) override {
    if (in_flight_ > 0) --in_flight_;
    planner_.on_outcome(task, outcome);
  }

  void on_input_error(const std::string&) override {}

  int stop_signal() const { return stop_signal_; }

 private:
  PayloadPlanner& planner_;
  StopSignals signals_;
  std::size_t in_flight_ = 0;
  int stop_signal_ = 0;
};

}  // namespace

RunSettings planned_run_settings(ChildConfig config, LaunchMode mode, std::size_t jobs,
                                 const std::string& sandbox_binary) {
  RunSettings run;
  run.config = std::move(config);
  run.mode = mode;
  run.jobs = std::max<std::size_t>(1, jobs);
  run.sandbox_binary = sandbox_binary_or_found(sandbox_binary);
  return run;
}

Expected<PlannedRunReport> run_planned(const RunSettings& settings, PayloadPlanner& planner) {
  PlannerAdapter adapter(planner);
  auto run = run_tasks(settings, adapter, adapter);
  PlannedRunReport report;
  if (!run) {
    if (adapter.stop_signal() == 0) return Error{run.error()};
    report.stop_signal = adapter.stop_signal();
    return report;
  }
  report.run = std::move(*run);
  return report;
}

}  // namespace pillbox
