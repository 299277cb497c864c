#pragma once
// What a worker of the fleet (docs/distributed.md) is told, and what it
// tells: its settings, the verdict it gives each entry it received, the sink
// that hears them, and its report.
#include <chrono>
#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <string_view>

#include "supervisor/broker/fleet_key.h"
#include "supervisor/broker/stream_protocol.h"
#include "supervisor/classify/outcome.h"
#include "supervisor/exec/task_source.h"
#include "supervisor/flow/circuit_breaker.h"
#include "supervisor/flow/retry_policy.h"
#include "supervisor/store/run_identity.h"

namespace pillbox::broker {

// The highest delivery count at which an entry is judged. Anyone can set the
// count (XCLAIM ... RETRYCOUNT) up to 2^63 - 1, and the history is read
// delivery by delivery. Beyond it, or below 1, the entry is dead-lettered
// unrun as protocol-error, its history unread: no fleet gets there by
// delivering (each delivery waits --claim-idle or a run).
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
  // The dispatcher's slots (--jobs): the engine's intake (stream_back_end.h)
  // reads as many entries ahead, so that a slot that comes free finds its
  // next entry here instead of waiting a round trip to Redis.
  std::size_t jobs = 1;
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

// The delivery count at which a back end settled or lost an entry or
// message, as answered to the engine (0: none known), asked once: the
// engine's attempt number is the count its attempt started at.
class SettleCounts {
 public:
  virtual ~SettleCounts() = default;
  virtual std::int64_t answered_at(const std::string& entry) = 0;
};

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

}  // namespace pillbox::broker
