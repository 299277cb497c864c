#include "supervisor/flow/circuit_breaker.h"

#include <algorithm>
#include <cmath>

namespace pillbox {

bool CircuitBreaker::record(const std::string& payload_id, bool failed, const std::string& fingerprint,
                            Clock::time_point now, std::string* check_first) {
  if (!settings_.enabled || settings_.window == 0) return false;
  if (open_) {
    if (!failed) close();
    return false;
  }
  // A retry of a payload replaces its entry: one payload failing many times
  // is a poison pill, not an outage.
  auto same = std::find_if(window_.begin(), window_.end(), [&](const Entry& e) { return e.payload_id == payload_id; });
  if (same != window_.end()) window_.erase(same);
  window_.push_back({payload_id, failed, fingerprint});
  while (window_.size() > settings_.window) window_.pop_front();
  // A fingerprint stays verified until `window` outcomes went by without a
  // failure of it: the next burst with it is then decided afresh (an
  // outage later in the run may fail the same way: a generic "exit code 1"
  // is a bad input's and a dead database's).
  ++recorded_;
  if (failed) {
    if (auto v = verified_.find(fingerprint); v != verified_.end()) {
      v->second.last_failure = recorded_;
      ++v->second.failures_since;
    }
  }
  std::erase_if(verified_, [&](const auto& v) { return recorded_ - v.second.last_failure > settings_.window; });
  std::erase_if(passed_check_, [&](const auto& p) { return recorded_ - p.second >= settings_.window; });
  // Only a failure opens it: the task that succeeded is no part of an outage.
  if (!failed || window_.size() < settings_.window) return false;

  std::size_t failures = 0;
  std::map<std::string, std::size_t> by_fingerprint;
  for (const auto& e : window_) {
    if (!e.failed) continue;
    ++failures;
    // A verified fingerprint still counts as a failure, but never as the
    // face of an outage.
    if (!verified(e.fingerprint) && deciding_.count(e.fingerprint) == 0 && passed_check_.count(e.fingerprint) == 0) {
      ++by_fingerprint[e.fingerprint];
    }
  }
  if (failures < needed_failures()) return false;
  const auto top = std::max_element(by_fingerprint.begin(), by_fingerprint.end(),
                                    [](const auto& a, const auto& b) { return a.second < b.second; });
  if (top == by_fingerprint.end() || top->second * 2 < failures) return false;  // poison pills, not one outage
  if (check_first != nullptr) {
    *check_first = top->first;
    return false;
  }
  open_with(top->first, failures, now);
  return true;
}

bool CircuitBreaker::open_now(const std::string& payload_id, const std::string& fingerprint, Clock::time_point now) {
  if (!settings_.enabled || open_ || verified(fingerprint)) return false;
  auto same = std::find_if(window_.begin(), window_.end(), [&](const Entry& e) { return e.payload_id == payload_id; });
  if (same != window_.end()) window_.erase(same);
  window_.push_back({payload_id, true, fingerprint});
  while (window_.size() > std::max<std::size_t>(settings_.window, 1)) window_.pop_front();
  open_with(fingerprint, failed_with(fingerprint), now);
  return true;
}

std::size_t CircuitBreaker::needed_failures() const {
  const auto needed = static_cast<std::size_t>(std::ceil(settings_.threshold * static_cast<double>(settings_.window)));
  return std::max<std::size_t>(needed, 1);
}

bool CircuitBreaker::fills_window(const std::string& fingerprint) const {
  if (!settings_.enabled || open_ || window_.size() < settings_.window) return false;
  const auto failures = static_cast<std::size_t>(
      std::count_if(window_.begin(), window_.end(), [](const Entry& e) { return e.failed; }));
  if (failures < needed_failures() || failed_with(fingerprint) * 2 < failures) return false;
  auto v = verified_.find(fingerprint);
  return v == verified_.end() || v->second.failures_since >= needed_failures();
}

void CircuitBreaker::set_deciding(const std::string& fingerprint, bool deciding) {
  if (deciding) deciding_.insert(fingerprint);
  else deciding_.erase(fingerprint);
}

std::size_t CircuitBreaker::failed_with(const std::string& fingerprint) const {
  return static_cast<std::size_t>(
      std::count_if(window_.begin(), window_.end(), [&](const Entry& e) { return e.failed && e.fingerprint == fingerprint; }));
}

void CircuitBreaker::open_for(const std::string& fingerprint, Clock::time_point now) {
  if (!settings_.enabled || open_) return;
  open_with(fingerprint, failed_with(fingerprint), now);
}

void CircuitBreaker::open_with(const std::string& fingerprint, std::size_t failures, Clock::time_point now) {
  open_ = true;
  opened_at_ = now;
  ++times_opened_;
  dominant_ = fingerprint;
  failures_when_opened_ = failures;
  probe_in_flight_ = false;
  next_probe_ = now + settings_.probe_interval;
}

bool CircuitBreaker::suspects(const std::string& fingerprint) const {
  if (!settings_.enabled || open_ || verified(fingerprint)) return false;
  const std::size_t recent = std::min(window_.size(), std::max<std::size_t>(4, settings_.window / 4));
  if (recent < 4) return false;
  std::size_t alike = 0;
  for (auto it = window_.end() - static_cast<long>(recent); it != window_.end(); ++it) {
    if (it->failed && it->fingerprint == fingerprint) ++alike;
  }
  return static_cast<double>(alike) >= settings_.threshold * static_cast<double>(recent);
}

bool CircuitBreaker::may_probe(Clock::time_point now) const { return open_ && !probe_in_flight_ && now >= next_probe_; }

bool CircuitBreaker::probe_ended(bool ok, Clock::time_point now, bool known_good) {
  probe_in_flight_ = false;
  bool verified_now = false;
  if (ok) {
    if (known_good && open_ && !cleared_once_.insert(dominant_).second) {
      verified_[dominant_] = Verification{recorded_, 0};
      verified_now = true;
    }
    close();
  } else {
    next_probe_ = now + settings_.probe_interval;
  }
  return verified_now;
}

std::optional<CircuitBreaker::Clock::time_point> CircuitBreaker::next_probe_at() const {
  if (!open_ || probe_in_flight_) return std::nullopt;
  return next_probe_;
}

bool CircuitBreaker::waited_too_long(Clock::time_point now) const {
  return open_ && settings_.max_wait.count() > 0 && now - opened_at_ >= settings_.max_wait;
}

void CircuitBreaker::close() {
  open_ = false;
  probe_in_flight_ = false;
  window_.clear();
}

}  // namespace pillbox
