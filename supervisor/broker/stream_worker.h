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
#include "supervisor/broker/stream_protocol.h"
#include "supervisor/exec/dispatcher.h"
#include "supervisor/exec/stop_signals.h"
#include "supervisor/flow/circuit_breaker.h"
#include "supervisor/flow/retry_policy.h"
#include "supervisor/store/run_identity.h"

namespace pillbox::broker {

// The highest delivery count at which an entry is judged. Redis counts one
// per delivery, but anyone can set the count (XCLAIM ... RETRYCOUNT) to
// anything up to 2^63 - 1, and an entry's history is read delivery by
// delivery (every one without a record is a lost one, listed in its dead
// letter). Beyond it, or below 1, an entry is dead-lettered as
// protocol-error, its history unread, unrun: no fleet reaches such counts by
// delivering an entry (each delivery waits --claim-idle or a run).
inline constexpr std::int64_t kMaxDeliveries = 10'000;

struct WorkerSettings {
  StreamKeys keys;
  Consumer consumer;
  RetrySettings retry;
  BreakerSettings breaker;
  RunIdentity identity;
  // An entry pending on a consumer idle this long is taken over; the
  // entries this worker holds are renewed three times as often.
  std::chrono::milliseconds claim_idle{30'000};
  // Exit once nothing new or claimable came for this long (and nothing is
  // held); empty: run until SIGTERM/SIGINT.
  std::optional<std::chrono::milliseconds> exit_when_idle;
  bool results = true;                 // ok results to NAME:results (--no-results: off)
  std::size_t results_maxlen = 100'000;  // ~cap of NAME:results (0: none)
  std::size_t max_payload = 512u << 20;  // larger payloads are dead-lettered as protocol-error
  std::size_t max_key = 4096;            // longer keys likewise (the dead letter keeps the whole key)
  // An ok result whose output is larger goes to NAME:results without it
  // (its size and SHA-256 instead, `output_omitted`): with results_maxlen,
  // NAME:results holds at most about maxlen x this many bytes of outputs.
  std::size_t results_max_output = 1u << 20;
  std::chrono::milliseconds read_block{1000};  // longest XREADGROUP wait
  std::optional<std::uint64_t> seed;   // the backoffs' jitter (tests)
  // A file of the host a failure shows the task could not see, as for run
  // (FlowSettings::hidden_path): such a failure opens the breaker at once.
  // The worker holds and probes as for any outage; only a restart with
  // --share can show the file. Empty: the rule is off.
  std::function<std::string(const Outcome&)> hidden_path;
  // Signs every dead letter (field `sig`, fleet_key.h); none: unsigned,
  // which the operators' verbs never run without --trust-unsigned.
  std::optional<FleetKey> fleet_key;
  // The run id of the Redis the worker started with (ServerState): a new
  // one after an outage means Redis restarted (server_restart.h).
  std::string server_run_id;
  // A restarted Redis without the consumer group (it lost its data): make
  // the group anew and go on with what is submitted from then on
  // (--recreate-group). Without it the worker stops (exit 3) and says so.
  bool recreate_group = false;
};

// What became of one entry on this worker, once.
struct WorkerVerdict {
  enum class Type {
    kOk,            // settled: result in NAME:results (`added`, "" with --no-results)
    kDeadLettered,  // settled: in NAME:dlq as `added`
    kReleased,      // left pending for another worker (gave up here, outage, stopping)
    kTakenOver,     // no longer this worker's (taken over, claimed by hand, deleted): nothing settled here
  };
  Type type = Type::kOk;
  std::string entry;
  std::int64_t deliveries = 0;
  std::string added;   // the results or dlq entry id
  std::string reason;
  // kDeadLettered: its kind and fingerprint were not among the fleet's dead
  // letters before (NAME:dlq:fingerprints; false when that could not be told).
  bool new_fingerprint = false;
};

// The word `pillbox worker` prints for a verdict: ok, dead-lettered,
// released, taken-over.
std::string_view to_string(WorkerVerdict::Type type);

class WorkerSink {
 public:
  virtual ~WorkerSink() = default;
  virtual void on_verdict(const Task& task, const Outcome& outcome, const WorkerVerdict& verdict) = 0;
  // Worker-level news: Redis lost and back, outage suspected, stopping.
  virtual void on_notice(const std::string& message) = 0;
};

struct WorkerReport {
  std::size_t deliveries = 0;     // entries received (read, claimed)
  std::size_t claimed = 0;        // of them taken over from idle consumers
  std::size_t attempts = 0;       // runs of entries (probe copies not counted)
  std::size_t ok = 0;
  std::size_t dead_lettered = 0;
  std::size_t retried = 0;        // redeliveries for a retry
  std::size_t released = 0;
  std::size_t taken_over = 0;
  std::size_t claimed_again = 0;  // own entries XAUTOCLAIM returned (renewal was late)
  std::size_t protocol_errors = 0;  // malformed entries dead-lettered unrun
  std::size_t outages = 0;
  std::size_t redis_lost = 0;     // outages: times Redis was lost (by one connection or both)
  std::size_t redis_restarts = 0;   // of them, Redis came back with a new run id
  std::size_t results_lost = 0;     // results this worker wrote, gone with a restart
  std::size_t dead_letters_lost = 0;  // dead letters likewise
  std::size_t groups_recreated = 0;   // --recreate-group
  int stop_signal = 0;
  std::string error;              // a Redis error that is not a lost connection (stops the worker)
};

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
  struct Entry {
    Task task;                 // task.ref is the key of entries_
    std::string id;            // stream entry id
    std::string redrive_of;    // the dead letter this entry redrives (field `redrive_of`), ""
    std::int64_t delivery = 1;  // Redis's count: judged only within 1..kMaxDeliveries
    EntryHistory history;      // deliveries before `delivery`
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
    // What else the entry held that its dead letter must keep (the entry is
    // deleted once settled): the second and later values of a repeated
    // `key`, `payload` or `redrive_of`, as ("repeated:NAME", value).
    std::vector<std::pair<std::string, std::string>> also_held;
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
  std::string record_json(const Entry& e, const Outcome& outcome, const std::string& reason) const;

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
