#pragma once
// The worker's flow (docs/distributed.md): entries of a Redis stream in,
// each run in the sandbox by the dispatcher (supervisor/exec/dispatcher.h),
// each settled on Redis. It is the dispatcher's TaskSource and OutcomeSink,
// as TaskFlow is for `run`, with Redis as the ledger:
//   * intake: new entries (XREADGROUP) and entries idle on dead consumers
//     (XAUTOCLAIM), only as many as there are free slots; an entry whose
//     previous delivery never reported back runs alone;
//   * per attempt: the retry policy (supervisor/flow/retry_policy.h) judges
//     the entry's whole fleet-wide history, not this worker's; retries wait
//     their backoff here, holding the entry (renewed), then are delivered
//     again (the count rises); the circuit breaker holds failures that look
//     like an outage of this worker's handler, uncharged, and stops intake;
//   * settling: ok -> NAME:results, poison -> NAME:dlq, in one fenced step
//     with the ack and the delete (supervisor/broker/stream_protocol.h).
// Redis is reached through two BrokerLinks (reads block; settles must not
// wait behind them), so nothing here ever blocks the dispatcher.
#include <chrono>
#include <cstdint>
#include <deque>
#include <map>
#include <memory>
#include <mutex>
#include <functional>
#include <optional>
#include <random>
#include <set>
#include <string>
#include <vector>

#include "supervisor/broker/broker_link.h"
#include "supervisor/broker/delivery_history.h"
#include "supervisor/broker/fleet_key.h"
#include "supervisor/broker/server_restart.h"
#include "supervisor/broker/stream_entry.h"
#include "supervisor/broker/stream_protocol.h"
#include "supervisor/broker/worker_settings.h"
#include "supervisor/exec/dispatcher.h"
#include "supervisor/exec/stop_signals.h"
#include "supervisor/flow/circuit_breaker.h"
#include "supervisor/flow/retry_policy.h"
#include "supervisor/store/run_identity.h"

namespace pillbox::broker {

class StreamWorker final : public TaskSource, public OutcomeSink {
 public:
  StreamWorker(WorkerSettings settings, BrokerLink& reader, BrokerLink& writer, WorkerSink& out);
  ~StreamWorker() override;

  // TaskSource
  Status prepare(std::size_t free_slots) override;
  Item next() override;
  std::vector<int> wait_fds() const override;
  // OutcomeSink
  void on_outcome(const Task& task, const Outcome& outcome) override;
  void on_input_error(const std::string& message) override { out_.on_notice(message); }

  // The links' state changes come here (BrokerLink::StateChange).
  void on_redis_state(bool up, const std::string& what);
  const WorkerReport& report() const { return report_; }
  // Whether the circuit breaker now suspects a handler outage (--metrics).
  bool breaker_open() const { return breaker_.open(); }

 private:
  using Clock = std::chrono::steady_clock;
  // kParked: judged poison with a fingerprint the breaker suspects of being
  // an outage's; waits, unrun, for the breaker to open (then it is held) or
  // the suspicion to fade (then it is dead-lettered).
  enum class Where { kReady, kRunning, kDelayed, kOutageHeld, kParked, kBusy };
  // task.ref is the key of entries_.
  struct Entry : HeldEntry {
    std::uint32_t transient_here = 0;
    std::uint32_t slot_renewals = 0;  // counts_as_transient's count
    bool solo = false;         // a suspect's delivery: runs alone, its start recorded first
    std::uint32_t start_recorded = 0;  // the delivery whose start marker is recorded (suspects)
    bool probe = false;        // running as the breaker's probe
    bool released = false;     // its verdict (released) was given; its release is being recorded
    Where where = Where::kBusy;
    Clock::time_point due{};
    Outcome parked_outcome;    // kParked: the failure it would be dead-lettered for
    std::string parked_reason;
  };
  // The entries this worker holds, shared with the writer link's renewal
  // (its own thread).
  struct Claims {
    std::mutex mutex;
    std::set<std::string> held;
  };

  void admit(Delivery d, bool claimed);
  // XAUTOCLAIM gave back an entry this worker holds (its renewal came late):
  // still its own; only the delivery count moved.
  void claimed_again(Entry& e, const Delivery& d);
  void intake(std::size_t free_slots, Clock::time_point now);
  void run_due(Clock::time_point now);
  void dead_letter(Entry& e, const Outcome& outcome, const std::string& reason);
  void settle_ok(Entry& e, const Outcome& outcome);
  // Records the delivery's end (fenced); then `after` on the owner's thread,
  // when it was recorded (an entry no longer ours is taken over, one whose
  // history is not a hash dead-lettered, unless released).
  void record(Entry& e, const RecordedDelivery& d, std::function<void()> after);
  // What a record's answer leads to: `next` with the entry, unless it is
  // gone or the worker is stopping (released).
  std::function<void()> then(std::uint64_t ref, std::function<void(Entry&)> next);
  // Recorded uncharged ("held: handler outage suspected"); waits for the
  // breaker to close.
  void hold_for_outage(Entry& e, const Outcome& outcome);
  void retry_later(Entry& e, std::uint32_t failures);
  // Records a suspect's start (delivery_history.h), then makes it ready to
  // run; nothing else starts meanwhile.
  void record_start(Entry& e);
  void redeliver_now(Entry& e);
  void release(Entry& e, const Outcome& outcome, const std::string& why);
  // The entry is no longer this worker's (`why`: why_not_held): nothing settled here.
  void taken_over(std::uint64_t ref, const std::string& why);
  void forget(std::uint64_t ref);
  void hold_claim(const Entry& e);
  void on_error(const std::string& message);
  // After an outage: asks Redis for its run id; a new one starts
  // on_restart. Until the answer, nothing is read, and errors wait (a
  // missing group is the restart's doing, not an error of its own).
  // False when there is nothing to check (no run id known).
  bool check_restart();
  // Says Redis is back, once no link is down (after the restart check).
  void end_outage();
  void on_server_state(const Expected<ServerState>& state, const std::string& where);
  // Reading resumes; the errors that waited are raised now.
  void end_restart_check();
  // on_error for a step on one entry (record, redeliver, settle): the entry
  // is forgotten here, left pending in Redis.
  void on_entry_error(std::uint64_t ref, const std::string& message);
  void start_stopping(const std::string& why);
  void probe(Clock::time_point now);
  void on_breaker_closed();
  // Calls on_breaker_closed once when the breaker went from open to closed
  // (a probe, or any success, closes it).
  void notice_breaker_change();
  // The ready entry that may start now, or ready_.end().
  std::deque<std::uint64_t>::iterator next_ready();
  // Parked entries: held once the breaker opened, dead-lettered once it no
  // longer suspects their fingerprint or nothing left could open it.
  void review_parked();
  std::optional<Clock::time_point> wake_at(Clock::time_point now) const;
  std::int64_t wall_ms() const;

  WorkerSettings settings_;
  BrokerLink& reader_;
  BrokerLink& writer_;
  WorkerSink& out_;
  std::shared_ptr<Claims> claims_ = std::make_shared<Claims>();
  CircuitBreaker breaker_;
  std::mt19937_64 rng_;
  StopSignals stop_signals_;

  std::map<std::uint64_t, Entry> entries_;
  std::deque<std::uint64_t> ready_;
  std::uint64_t next_ref_ = 0;
  std::size_t in_flight_ = 0;
  std::size_t slots_ = 0;      // the most free slots ever seen: --jobs
  bool solo_running_ = false;
  bool breaker_was_open_ = false;
  bool read_outstanding_ = false;
  bool claim_outstanding_ = false;
  std::string claim_cursor_ = "0-0";
  Clock::time_point next_claim_at_{};
  Clock::time_point last_activity_;
  bool intake_started_ = false;
  bool stopping_ = false;      // SIGTERM, idle, or an error: read nothing new
  std::optional<Task> known_good_;  // a payload that succeeded here (small): the probe of choice
  std::set<std::string> hidden_path_claimed_;  // payload ids whose failure the hidden-path rule took at its word
  bool probe_copy_running_ = false;
  std::uint64_t probe_copy_ref_ = 0;
  std::size_t redis_down_ = 0;  // links whose connection is lost now
  bool outage_open_ = false;    // said lost, not yet said back
  Clock::time_point outage_since_{};
  WrittenEntries results_written_;       // what a restart may have lost (server_restart.h)
  WrittenEntries dead_letters_written_;
  bool restart_check_pending_ = false;   // check_restart asked, or the group is being made anew
  std::vector<std::string> deferred_errors_;  // errors that came while it was pending
  WorkerReport report_;
};

}  // namespace pillbox::broker
