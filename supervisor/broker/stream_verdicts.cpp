#include "supervisor/broker/stream_verdicts.h"

namespace pillbox::broker {

void StreamVerdicts::on_verdict(const Task& task, const Outcome& outcome, const Verdict& v) {
  // The count it settled at, when known (SettleCounts::answered_at).
  const std::int64_t at = back_end_.answered_at(task.source_id);
  WorkerVerdict w{.entry = task.source_id, .deliveries = at != 0 ? at : v.attempts, .added = v.settled_as,
                  .reason = v.reason, .new_fingerprint = v.new_fingerprint};
  switch (v.type) {
    case Verdict::Type::kOk:
      w.type = WorkerVerdict::Type::kOk;
      break;
    case Verdict::Type::kQuarantined:
    case Verdict::Type::kPoison:
      w.type = WorkerVerdict::Type::kDeadLettered;
      break;
    case Verdict::Type::kGaveUp:
      w.type = WorkerVerdict::Type::kReleased;
      w.reason += "; left pending for another worker";
      ++released_;
      break;
    case Verdict::Type::kHeld:
      w.type = WorkerVerdict::Type::kReleased;
      ++released_;
      break;
  }
  out_.on_verdict(task, outcome, w);
}

void StreamVerdicts::on_lost(const Task& task, const TaskLost& lost) {
  const std::int64_t deliveries = back_end_.answered_at(task.source_id);
  switch (lost.as) {
    case LostAs::kDeadLettered:  // by the back end itself, and told then
      return;
    case LostAs::kLeftPending:  // its step failed on a Redis error: left for the fleet, as a release
      ++released_;
      out_.on_verdict(task, Outcome{},
                      WorkerVerdict{WorkerVerdict::Type::kReleased, task.source_id, deliveries, "", lost.why});
      return;
    case LostAs::kHandedBack:  // a retry waits in the broker: no longer this worker's (not given back)
      out_.on_verdict(task, Outcome{},
                      WorkerVerdict{WorkerVerdict::Type::kReleased, task.source_id, deliveries, "", lost.why});
      return;
    case LostAs::kTakenOver:
      ++taken_over_;
      out_.on_verdict(task, Outcome{}, WorkerVerdict{WorkerVerdict::Type::kTakenOver, task.source_id, deliveries, "",
                                                     "not settled here: " + lost.why});
      return;
  }
}

}  // namespace pillbox::broker
