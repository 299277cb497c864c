#pragma once
// Poison or outage? One payload failing is a poison pill; many *distinct*
// payloads failing the same way at once is a broken handler, a bad deploy or
// a missing dependency: quarantining them all would bury the real poison
// pills and lose the work. A burst of poison (a bad batch, sorted together)
// looks the same from here; the flow decides that before quarantining
// (task_flow.h, PendingDecision). The rules (window, known-good probes,
// verified fingerprints): docs/architecture.md, 'Outages'.
#include <chrono>
#include <cstdint>
#include <deque>
#include <map>
#include <optional>
#include <set>
#include <string>

namespace pillbox {

struct BreakerSettings {
  bool enabled = true;
  std::size_t window = 20;       // distinct payloads considered
  double threshold = 0.8;        // fraction of them failing that opens it
  std::chrono::milliseconds probe_interval{1000};
  // Open longer than this without a success: the run stops (exit 4) with
  // what it holds. Zero: no limit.
  std::chrono::milliseconds max_wait{5 * 60 * 1000};
};

class CircuitBreaker {
 public:
  using Clock = std::chrono::steady_clock;
  explicit CircuitBreaker(BreakerSettings settings) : settings_(settings) {}

  // The latest outcome of a payload (`payload_id` identifies it: key + hash).
  // Returns true when this outcome opened the breaker. With `check_first`
  // (the flow has a payload known to work at hand), the window does not open
  // it by itself: `*check_first` is set to the fingerprint it would open
  // with, and the flow's known-good check decides (a burst of poison — bad
  // inputs sorted together, still in their retries — fills the window just
  // as an outage does; only the handler failing a payload that worked tells
  // them apart, and an opening cannot be taken back quietly).
  bool record(const std::string& payload_id, bool failed, const std::string& fingerprint, Clock::time_point now,
              std::string* check_first = nullptr);

  // The hidden-path rule: a failure that shows the task could not see a
  // file this host has (supervisor/exec/host_view.h) is the run's setup, not
  // the payload, whatever the window holds: it opens the breaker at once,
  // with `fingerprint` as the outage's face. Not when disabled, or for a
  // fingerprint verified as the payloads' own. True when it opened.
  bool open_now(const std::string& payload_id, const std::string& fingerprint, Clock::time_point now);

  bool open() const { return open_; }
  // Early warning, before the window is full: of the most recent
  // max(4, window/4) distinct payloads, at least `threshold` failed with
  // `fingerprint`. The fleet worker parks such payloads rather than
  // quarantine an outage's first victims before the breaker opens.
  bool suspects(const std::string& fingerprint) const;
  // While open: whether a probe may start now (one at a time).
  bool may_probe(Clock::time_point now) const;
  // The next probe may start at once (a known-good payload is at hand: it
  // answers the question in one task, no need to wait).
  void probe_now(Clock::time_point now) { next_probe_ = now; }
  void probe_started() { probe_in_flight_ = true; }
  // The end of a probe; a failed one sets the next probe time. A successful
  // `known_good` probe (a payload that succeeded earlier in this run) for a
  // fingerprint one has cleared before verifies it; returns true then.
  bool probe_ended(bool ok, Clock::time_point now, bool known_good = false);
  std::optional<Clock::time_point> next_probe_at() const;
  // When it opened (meaningful while open), and whether it has been open
  // longer than `max_wait`.
  Clock::time_point opened_at() const { return opened_at_; }
  bool waited_too_long(Clock::time_point now) const;
  bool verified(const std::string& fingerprint) const { return verified_.count(fingerprint) > 0; }
  // The flow showed by itself (a known-good check, then the same failure
  // again) that payloads fail this way on their own.
  void verify(const std::string& fingerprint) { verified_[fingerprint] = Verification{recorded_, 0}; }
  void unverify(const std::string& fingerprint) { verified_.erase(fingerprint); }
  // The window would open the breaker with `fingerprint`, were it not
  // verified or deciding; for a verified one, it also failed that many times
  // since it was verified. The flow then decides it afresh
  // (TaskFlow::waits_for_decision): an outage that fails as bad inputs did is
  // told apart again, at one decision per window's worth of poison.
  bool fills_window(const std::string& fingerprint) const;
  // While the flow is deciding about a fingerprint with a known-good check,
  // the window does not open the breaker with it as its face: the check
  // answers sooner and better. Off again once decided.
  void set_deciding(const std::string& fingerprint, bool deciding);
  // A known-good check passed while the window filled with `fingerprint`
  // (record's `check_first`): the handler works, and it is not an outage's
  // face until `window` more outcomes are recorded (a run of bad inputs asks
  // again at most once per window's worth of outcomes).
  void passed_check(const std::string& fingerprint) { passed_check_[fingerprint] = recorded_; }
  // How many payloads in the window failed last with `fingerprint`.
  std::size_t failed_with(const std::string& fingerprint) const;
  // Opens it for `fingerprint` now: a payload that succeeded earlier in the
  // run failed (the flow's known-good check). The next probe waits
  // probe_interval. No-op when disabled or already open.
  void open_for(const std::string& fingerprint, Clock::time_point now);

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
  std::size_t needed_failures() const;  // failures in a full window that open it
  void open_with(const std::string& fingerprint, std::size_t failures, Clock::time_point now);

  BreakerSettings settings_;
  std::deque<Entry> window_;
  bool open_ = false;
  bool probe_in_flight_ = false;
  Clock::time_point next_probe_{};
  Clock::time_point opened_at_{};
  std::string dominant_;
  std::set<std::string> cleared_once_;  // a known-good probe ended an opening for these once
  // Fingerprints shown to be the payloads' own, with the count of outcomes
  // recorded at their latest failure: `window` outcomes without one (kept
  // across close(), which empties the window) and the verification ends.
  struct Verification {
    std::uint64_t last_failure = 0;  // recorded_ at its latest failure
    std::size_t failures_since = 0;  // its failures since it was verified
  };
  std::map<std::string, Verification> verified_;
  std::uint64_t recorded_ = 0;          // outcomes record() has seen
  std::set<std::string> deciding_;      // set_deciding
  std::map<std::string, std::uint64_t> passed_check_;  // passed_check: recorded_ then
  std::size_t failures_when_opened_ = 0;
  std::size_t times_opened_ = 0;
};

}  // namespace pillbox
