#include "supervisor/flow/task_schedule.h"

namespace pillbox {

std::optional<TaskSchedule::Ref> TaskSchedule::take_ready() {
  if (ready_.empty()) return std::nullopt;
  const Ref ref = ready_.front();
  ready_.pop_front();
  return ref;
}

std::vector<TaskSchedule::Ref> TaskSchedule::take_due(Clock::time_point now, std::size_t max) {
  std::vector<Ref> due;
  while (due.size() < max && !delayed_.empty() && delayed_.begin()->first <= now) {
    due.push_back(delayed_.begin()->second);
    delayed_.erase(delayed_.begin());
  }
  return due;
}

std::optional<TaskSchedule::Clock::time_point> TaskSchedule::next_due() const {
  if (delayed_.empty()) return std::nullopt;
  return delayed_.begin()->first;
}

std::vector<TaskSchedule::Ref> TaskSchedule::take_held() {
  std::vector<Ref> held(held_.begin(), held_.end());
  held_.clear();
  return held;
}

std::vector<TaskSchedule::Ref> TaskSchedule::take_parked_if(const std::function<bool(Ref)>& leave) {
  std::vector<Ref> left;
  std::vector<Ref> stay;
  for (Ref ref : parked_) (leave(ref) ? left : stay).push_back(ref);
  parked_.swap(stay);
  return left;
}

std::vector<TaskSchedule::Ref> TaskSchedule::take_delayed_and_parked() {
  std::vector<Ref> taken;
  for (const auto& [when, ref] : delayed_) taken.push_back(ref);
  delayed_.clear();
  taken.insert(taken.end(), parked_.begin(), parked_.end());
  parked_.clear();
  return taken;
}

void TaskSchedule::remove(Ref ref) {
  std::erase(ready_, ref);
  std::erase_if(delayed_, [ref](const auto& d) { return d.second == ref; });
  std::erase(held_, ref);
  std::erase(parked_, ref);
  std::erase(suspects_, ref);
}

std::optional<TaskSchedule::Ref> TaskSchedule::start_solo(std::size_t in_flight) {
  if (!suspect_may_start(in_flight)) return std::nullopt;
  solo_ = suspects_.front();
  suspects_.pop_front();
  return solo_;
}

}  // namespace pillbox
