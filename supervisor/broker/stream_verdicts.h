#pragma once
// The attempt engine's verdicts (supervisor/flow/verdict.h) in a worker's
// words (WorkerVerdict): ok and dead-lettered name the entry they settled
// to; given up or given back is released (left pending for the fleet); a
// task lost to the back end is taken over. Notices pass through.
#include <cstddef>
#include <string>

#include "supervisor/broker/worker_settings.h"
#include "supervisor/flow/ledger_batch.h"
#include "supervisor/flow/verdict.h"

namespace pillbox::broker {

class StreamVerdicts final : public VerdictSink {
 public:
  // Both outlive this.
  StreamVerdicts(SettleCounts& back_end, WorkerSink& out) : back_end_(back_end), out_(out) {}

  void on_verdict(const Task& task, const Outcome& outcome, const Verdict& verdict) override;
  void on_input_error(const std::string& message) override { out_.on_notice(message); }
  void on_notice(const std::string& message) override { out_.on_notice(message); }
  void on_lost(const Task& task, const TaskLost& lost) override;

  std::size_t released() const { return released_; }
  std::size_t taken_over() const { return taken_over_; }

 private:
  SettleCounts& back_end_;
  WorkerSink& out_;
  std::size_t released_ = 0;
  std::size_t taken_over_ = 0;
};

}  // namespace pillbox::broker
