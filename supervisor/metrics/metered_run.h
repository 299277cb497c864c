#pragma once
// Wrappers that forward every call unchanged and count on the way into a
// RunMetrics (run_metrics.h: a few increments per task, nothing that waits):
//   MeteredRun             the dispatcher's TaskSource and OutcomeSink: busy
//                          slots, attempts, durations, the breaker's state;
//   MeteredVerdicts        `run`'s VerdictSink: tasks by kind and verdict,
//                          new fingerprints, verdicts taken back, input errors;
//   MeteredWorkerVerdicts  the same for `worker`'s WorkerSink.
#include <functional>
#include <string>
#include <vector>

#include "supervisor/broker/worker_settings.h"
#include "supervisor/exec/dispatcher.h"
#include "supervisor/flow/verdict.h"
#include "supervisor/metrics/run_metrics.h"

namespace pillbox::metrics {

class MeteredRun final : public TaskSource, public OutcomeSink {
 public:
  // `breaker_open` reads the breaker of the flow behind `source` and `sink`;
  // called on the dispatcher's thread after each step that may move it.
  // Everything given outlives this.
  MeteredRun(TaskSource& source, OutcomeSink& sink, RunMetrics& metrics, std::function<bool()> breaker_open);

  Item next() override;
  int wait_fd() const override { return source_.wait_fd(); }
  std::vector<int> wait_fds() const override { return source_.wait_fds(); }
  Status prepare(std::size_t free_slots) override;
  Status commit_turn() override { return source_.commit_turn(); }
  std::vector<std::uint64_t> take_stopped() override { return source_.take_stopped(); }
  void on_outcome(const Task& task, const Outcome& outcome) override;
  void on_input_error(const std::string& message) override { sink_.on_input_error(message); }

 private:
  TaskSource& source_;
  OutcomeSink& sink_;
  RunMetrics& metrics_;
  std::function<bool()> breaker_open_;
  bool breaker_was_open_ = false;  // what metrics_ has: told again only when it changes

  void note_breaker();
};

class MeteredVerdicts final : public VerdictSink {
 public:
  MeteredVerdicts(VerdictSink& sink, RunMetrics& metrics) : sink_(sink), metrics_(metrics) {}

  void on_verdict(const Task& task, const Outcome& outcome, const Verdict& verdict) override;
  void on_input_error(const std::string& message) override;
  void on_notice(const std::string& message) override { sink_.on_notice(message); }
  void on_skipped(const Task& task, const std::string& why, std::int64_t record_id) override {
    sink_.on_skipped(task, why, record_id);
  }
  void on_done_result(const Task& task, const std::string* output, const std::string& why_not) override {
    sink_.on_done_result(task, output, why_not);
  }
  void on_taken_back(const Task& task, const Outcome& outcome, const std::string& why,
                     std::int64_t record_id) override;
  void on_status(const std::string& status) override { sink_.on_status(status); }
  void on_lost(const Task& task, const TaskLost& lost) override { sink_.on_lost(task, lost); }

 private:
  VerdictSink& sink_;
  RunMetrics& metrics_;
};

class MeteredWorkerVerdicts final : public broker::WorkerSink {
 public:
  MeteredWorkerVerdicts(broker::WorkerSink& sink, RunMetrics& metrics) : sink_(sink), metrics_(metrics) {}

  void on_verdict(const Task& task, const Outcome& outcome, const broker::WorkerVerdict& verdict) override;
  void on_notice(const std::string& message) override { sink_.on_notice(message); }

 private:
  broker::WorkerSink& sink_;
  RunMetrics& metrics_;
};

}  // namespace pillbox::metrics
