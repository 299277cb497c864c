#include "supervisor/metrics/metered_run.h"

#include <utility>

namespace pillbox::metrics {

MeteredRun::MeteredRun(TaskSource& source, OutcomeSink& sink, RunMetrics& metrics, std::function<bool()> breaker_open)
    : source_(source), sink_(sink), metrics_(metrics), breaker_open_(std::move(breaker_open)) {}

// Each task next() gives gets exactly one outcome (dispatcher.h): a slot is
// busy from one to the other.
TaskSource::Item MeteredRun::next() {
  Item item = source_.next();
  if (item.type == Item::Type::kTask) metrics_.attempt_started();
  note_breaker();  // a probe may be handed out, or the longest wait run out, here
  return item;
}

Status MeteredRun::prepare(std::size_t free_slots) { return source_.prepare(free_slots); }

void MeteredRun::on_outcome(const Task& task, const Outcome& outcome) {
  // A copy run for the breaker's answer is no attempt: only its slot is freed.
  if (task.probe_copy) {
    metrics_.slot_freed();
  } else {
    metrics_.attempt_ended(outcome.kind, outcome.wall_ms);
  }
  sink_.on_outcome(task, outcome);
  note_breaker();  // an outcome is what opens or closes the breaker
}

// next() is asked many times a turn: the metrics' lock is taken only when
// the breaker moved.
void MeteredRun::note_breaker() {
  const bool open = breaker_open_();
  if (open == breaker_was_open_) return;
  breaker_was_open_ = open;
  metrics_.set_breaker_open(open);
}

void MeteredVerdicts::on_verdict(const Task& task, const Outcome& outcome, const Verdict& verdict) {
  metrics_.verdict(outcome.kind, std::string(to_string(verdict.type)), verdict.new_fingerprint);
  sink_.on_verdict(task, outcome, verdict);
}

void MeteredVerdicts::on_input_error(const std::string& message) {
  metrics_.input_error();
  sink_.on_input_error(message);
}

void MeteredVerdicts::on_taken_back(const Task& task, const Outcome& outcome, const std::string& why,
                                    std::int64_t record_id) {
  metrics_.taken_back();
  sink_.on_taken_back(task, outcome, why, record_id);
}

void MeteredWorkerVerdicts::on_verdict(const Task& task, const Outcome& outcome, const broker::WorkerVerdict& verdict) {
  // New to the fleet's dead letters (NAME:dlq:fingerprints), not to a store.
  metrics_.verdict(outcome.kind, std::string(broker::to_string(verdict.type)), verdict.new_fingerprint);
  sink_.on_verdict(task, outcome, verdict);
}

}  // namespace pillbox::metrics
