#pragma once
// Poison or outage? One payload failing is a poison pill; many *distinct*
// payloads failing the same way at once is a broken handler, a bad deploy or
// a missing dependency — quarantining them all would bury the real poison
// pills and lose the work. The breaker watches the latest outcome of the
// last `window` distinct payloads; when at least `threshold` of them failed
// and one fingerprint accounts for at least half of the failures, it opens:
// intake pauses, the failures are not held against their payloads, and
// single probe tasks run every `probe_interval` until one succeeds.
// Only a failure opens it: a success is no part of an outage.
#include <chrono>
#include <cstdint>
#include <deque>
#include <map>
#include <optional>
#include <string>

namespace pillbox {

struct BreakerSettings {
  bool enabled = true;
  std::size_t window = 20;       // distinct payloads considered
  double threshold = 0.8;        // fraction of them failing that opens it
  std::chrono::milliseconds probe_interval{1000};
};

class CircuitBreaker {
 public:
  using Clock = std::chrono::steady_clock;
  explicit CircuitBreaker(BreakerSettings settings) : settings_(settings) {}

  // The latest outcome of a payload (`payload_id` identifies it: key + hash).
  // Returns true when this outcome opened the breaker.
  bool record(const std::string& payload_id, bool failed, const std::string& fingerprint, Clock::time_point now);

  bool open() const { return open_; }
  // Early warning, before the window is full: of the most recent
  // max(4, window/4) distinct payloads, at least `threshold` failed with
  // `fingerprint`. The flow then parks the payloads it would quarantine
  // with that fingerprint, without running them, until the breaker opens
  // (they are held) or the suspicion fades (they are quarantined), so that
  // the first payloads of an outage are not quarantined in the moments
  // before the breaker opens.
  bool suspects(const std::string& fingerprint) const;
  // While open: whether a probe may start now (one at a time).
  bool may_probe(Clock::time_point now) const;
  void probe_started() { probe_in_flight_ = true; }
  // The end of a probe; a failed one sets the next probe time.
  void probe_ended(bool ok, Clock::time_point now);
  std::optional<Clock::time_point> next_probe_at() const;

  const std::string& dominant_fingerprint() const { return dominant_; }
  std::size_t failures_when_opened() const { return failures_when_opened_; }
  std::size_t times_opened() const { return times_opened_; }

 private:
  struct Entry {
    std::string payload_id;
    bool failed = false;
    std::string fingerprint;
  };
  void close();

  BreakerSettings settings_;
  std::deque<Entry> window_;
  bool open_ = false;
  bool probe_in_flight_ = false;
  Clock::time_point next_probe_{};
  std::string dominant_;
  std::size_t failures_when_opened_ = 0;
  std::size_t times_opened_ = 0;
};

}  // namespace pillbox
