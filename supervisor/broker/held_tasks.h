#pragma once
// The tasks a fleet worker holds, from their delivery until they are
// settled, given back or lost, written once for every back end
// (StreamBackEnd, AmqpBackEnd, KafkaBackEnd): by the engine's task id, by
// their place at the broker (Task::source_id: an entry id, a message id, a
// partition@offset) for the engine's find(), and the queue of those read
// and not yet handed to the engine, in their order. Each back end's `Held`
// is a HeldEntry (stream_entry.h) with its broker's own fields, and a
// `task_id` and a `handed` flag.
//
// Also the delivery the engine was told of each task at, settled or lost
// (SettleCounts::answered_at), asked once each.
#include <algorithm>
#include <cstdint>
#include <deque>
#include <map>
#include <optional>
#include <string>
#include <utility>

#include "shared/status.h"
#include "supervisor/broker/delivery_history.h"
#include "supervisor/broker/worker_settings.h"
#include "supervisor/exec/task_source.h"
#include "supervisor/flow/ledger_batch.h"
#include "supervisor/store/ledger.h"

namespace pillbox::broker {

template <class Held>
class HeldTasks {
 public:
  using Map = std::map<std::int64_t, Held>;

  // A new task, under the next task id (not queued, not known by its
  // source until named).
  Held& hold() {
    const std::int64_t id = ++last_id_;
    Held& h = held_[id];
    h.task_id = id;
    return h;
  }
  // Known from now on by `source` (its Task::source_id).
  void name(Held& h, std::string source) {
    h.task.source_id = std::move(source);
    by_source_[h.task.source_id] = h.task_id;
  }
  bool knows(const std::string& source) const { return by_source_.count(source) > 0; }
  Held* find(std::int64_t task_id) {
    auto it = held_.find(task_id);
    return it == held_.end() ? nullptr : &it->second;
  }
  Held* by_source(const std::string& source) {
    auto it = by_source_.find(source);
    return it == by_source_.end() ? nullptr : find(it->second);
  }
  // Forgets it, wherever it is (queued or not).
  void release(std::int64_t task_id) {
    auto it = held_.find(task_id);
    if (it == held_.end()) return;
    unqueue(task_id);
    by_source_.erase(it->second.task.source_id);
    held_.erase(it);
  }

  bool empty() const { return held_.empty(); }
  std::size_t size() const { return held_.size(); }
  // Every task held, by task id (not to be changed while iterated).
  const Map& all() const { return held_; }
  Map& all() { return held_; }

  // Read and not yet handed to the engine.
  void queue(std::int64_t task_id) { queued_.push_back(task_id); }
  void unqueue(std::int64_t task_id) { queued_.erase(std::remove(queued_.begin(), queued_.end(), task_id), queued_.end()); }
  bool none_queued() const { return queued_.empty(); }
  std::size_t queued() const { return queued_.size(); }
  std::int64_t first_queued() const { return queued_.front(); }
  // The queue, emptied (each to be given back or released).
  std::deque<std::int64_t> take_queue() { return std::exchange(queued_, {}); }
  // The first queued, handed to the engine: what the intake gives.
  TaskSource::Item hand_first() {
    Held& h = held_.at(queued_.front());
    queued_.pop_front();
    h.handed = true;
    TaskSource::Item item;
    item.type = TaskSource::Item::Type::kTask;
    item.task.key = h.task.key;
    item.task.payload = h.task.payload;
    item.task.source_id = h.task.source_id;
    return item;
  }

  // The engine's find() of a task held (`what` names the broker's thing in
  // its error): pending, with the deliveries before this one and their
  // history.
  Expected<std::optional<store::LedgerTask>> ledger_task(const std::string& source, const std::string& what) const {
    auto it = by_source_.find(source);
    if (it == by_source_.end()) return Error{what + " " + source + " is not held by this worker"};
    const Held& h = held_.at(it->second);
    store::LedgerTask known;
    known.id = h.task_id;
    known.state = store::TaskState::kPending;
    known.attempts = static_cast<std::uint32_t>(std::max<std::int64_t>(h.delivery - 1, 0));
    known.history = engine_history(h.history, static_cast<std::uint32_t>(h.delivery));
    return std::optional<store::LedgerTask>{std::move(known)};
  }

  // The engine is told of the task at `source` (settled, lost) at `delivery`.
  void answered(const std::string& source, std::int64_t delivery) { answered_at_[source] = delivery; }
  // SettleCounts::answered_at: that delivery, asked once (0: none).
  std::int64_t answered_at(const std::string& source) {
    auto it = answered_at_.find(source);
    if (it == answered_at_.end()) return 0;
    const std::int64_t delivery = it->second;
    answered_at_.erase(it);
    return delivery;
  }
  // Nothing more to answer of it.
  void unanswered(const std::string& source) { answered_at_.erase(source); }

 private:
  Map held_;
  std::deque<std::int64_t> queued_;
  std::map<std::string, std::int64_t> by_source_;
  std::map<std::string, std::int64_t> answered_at_;
  std::int64_t last_id_ = 0;
};

// Tells of a held task its back end settled (its result or dead letter
// written, the broker done with it), as `where` names it: ok, or
// dead-lettered by the engine's verdict, or dead-lettered `unrun` by the
// intake (the verdict is told here, and the engine, if it had the task,
// loses it). Counted in `report`.
template <class Held>
void tell_settled(const Held& h, bool ok, bool unrun, const std::string& where, const std::string& detail,
                  BatchResult& answers, WorkerReport& report, WorkerSink& out) {
  if (ok) {
    ++report.ok;
    if (h.ref != 0) answers.settled.push_back({h.ref, where});
    return;
  }
  ++report.dead_lettered;
  if (unrun || h.ref == 0) {
    out.on_verdict(h.task, h.verdict_outcome,
                   WorkerVerdict{WorkerVerdict::Type::kDeadLettered, h.task.source_id, h.delivery, where, detail, false});
    if (h.ref != 0) answers.lost.push_back({h.ref, "dead-lettered unrun: " + detail, LostAs::kDeadLettered});
    return;
  }
  QuarantineWritten q;
  q.ref = h.ref;
  q.settled_as = where;
  answers.quarantined.push_back(std::move(q));
}

// Whether a batch of answers has any (AttemptStore::has_unapplied, with
// the writes not applied yet).
inline bool has_answers(const BatchResult& a) {
  return !a.started.empty() || !a.quarantined.empty() || !a.lost.empty() || !a.settled.empty();
}

}  // namespace pillbox::broker
