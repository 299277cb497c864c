#pragma once
// Where each task of the flow waits for its next attempt, by the task flow's
// ref (task_flow.h). A task is in at most one place:
//   ready     its attempt is counted in the ledger; next() hands it out;
//   delayed   a retry waiting for its backoff;
//   held      failed during a suspected outage: waits for the breaker to close;
//   parked    judged poison with a failure other payloads share: waits,
//             without running, for "outage or poison?" to be decided;
//   suspect   its last attempt never finished (the supervisor died): runs
//             alone, the solo task, while nothing else is in flight.
// Running tasks and settled ones are in none of them. Pure bookkeeping: no
// clock of its own, no I/O; the flow decides when a task moves.
#include <chrono>
#include <cstdint>
#include <deque>
#include <functional>
#include <map>
#include <optional>
#include <vector>

namespace pillbox {

class TaskSchedule {
 public:
  using Clock = std::chrono::steady_clock;
  using Ref = std::uint64_t;

  void make_ready(Ref ref) { ready_.push_back(ref); }
  std::optional<Ref> take_ready();
  std::size_t ready_count() const { return ready_.size(); }

  void delay(Ref ref, Clock::time_point until) { delayed_.emplace(until, ref); }
  // Delayed tasks whose time has come, earliest first, at most `max`.
  std::vector<Ref> take_due(Clock::time_point now, std::size_t max);
  std::optional<Clock::time_point> next_due() const;

  void hold(Ref ref) { held_.push_back(ref); }
  // Every held task, in the order held; none is held after.
  std::vector<Ref> take_held();
  std::size_t held_count() const { return held_.size(); }

  void park(Ref ref) { parked_.push_back(ref); }
  bool has_parked() const { return !parked_.empty(); }
  const std::vector<Ref>& parked() const { return parked_; }
  // Parked tasks for which `leave(ref)` is true, in the order parked; the
  // others stay.
  std::vector<Ref> take_parked_if(const std::function<bool(Ref)>& leave);

  // Delayed and parked tasks, all at once (the breaker opened: they wait for
  // it instead), delayed ones first.
  std::vector<Ref> take_delayed_and_parked();

  void add_suspect(Ref ref) { suspects_.push_back(ref); }
  // The next suspect becomes the solo task, when nothing else is in flight
  // or ready and no other runs alone; nullopt otherwise.
  std::optional<Ref> start_solo(std::size_t in_flight);
  Ref solo() const { return solo_; }
  bool is_solo(Ref ref) const { return ref != 0 && ref == solo_; }
  void end_solo(Ref ref) {
    if (ref == solo_) solo_ = 0;
  }
  // True while a suspect runs alone or waits to: nothing new may start.
  bool solo_mode() const { return solo_ != 0 || !suspects_.empty(); }
  // A suspect could start now (nothing in flight, none running alone).
  bool suspect_may_start(std::size_t in_flight) const {
    return solo_ == 0 && !suspects_.empty() && in_flight == 0 && ready_.empty();
  }

  // The task leaves whatever place it is in (a back end lost it). Running
  // alone, it still does (end_solo when it ends).
  void remove(Ref ref);

  // Nothing delayed, suspected or running alone (ready, held and parked
  // tasks are the flow's to judge).
  bool quiet() const { return delayed_.empty() && suspects_.empty() && solo_ == 0; }

 private:
  std::deque<Ref> ready_;
  std::multimap<Clock::time_point, Ref> delayed_;
  std::deque<Ref> held_;
  std::vector<Ref> parked_;
  std::deque<Ref> suspects_;
  Ref solo_ = 0;
};

}  // namespace pillbox
