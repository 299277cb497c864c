#pragma once
// Redis Streams as a back end of the attempt engine (supervisor/flow/
// task_flow.h): the engine decides, this records on Redis through
// stream_protocol.h (docs/architecture.md, Adding a back end). An entry that
// is not a task pillbox can judge is dead-lettered unrun at intake
// (stream_entry.h); an attempt's number is Redis's delivery count at its
// start; an entry no longer held is lost to the engine (TaskLost).
// Two BrokerLinks (reads block; settles must not wait behind them); their
// answers are drained by apply() and the intake, so nothing here blocks the
// dispatcher.
#include <chrono>
#include <cstdint>
#include <deque>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "shared/unique_fd.h"
#include "supervisor/broker/broker_link.h"
#include "supervisor/broker/server_restart.h"
#include "supervisor/broker/held_tasks.h"
#include "supervisor/broker/stream_entry.h"
#include "supervisor/broker/worker_settings.h"
#include "supervisor/exec/stop_signals.h"
#include "supervisor/flow/attempt_store.h"

namespace pillbox::broker {

class StreamBackEnd final : public AttemptStore, public SettleCounts {
 public:
  // The links and the sink are not owned and outlive the back end; the
  // links stop before it goes (nothing of theirs runs later).
  StreamBackEnd(WorkerSettings settings, BrokerLink& reader, BrokerLink& writer, WorkerSink& out);
  ~StreamBackEnd() override;
  StreamBackEnd(const StreamBackEnd&) = delete;
  StreamBackEnd& operator=(const StreamBackEnd&) = delete;

  // The engine's inner TaskSource: the entries read and claimed, checked.
  // Each task carries its entry id (Task::source_id).
  TaskSource& intake() { return intake_; }
  // Reads nothing new from now on; entries read and not yet handed to the
  // engine are released (recorded as not run, left for the fleet), and the
  // intake ends once its reads are answered.
  void stop_reading(const std::string& why);
  // Runs the answers of Redis that came back (they also run in apply() and
  // the intake's next()).
  void drain();
  // Every step posted to Redis answered (or the links stopped).
  bool quiet() const;
  // A link's connection is lost now (its steps wait for Redis to come back).
  bool links_down() const { return redis_down_ > 0; }
  const WorkerReport& report() const { return report_; }
  // The delivery count at which an entry was settled or lost, as answered
  // to the engine (0: none known), once: the engine's attempt number is
  // the count its attempt started at, and the entry may have been claimed
  // again since.
  std::int64_t answered_at(const std::string& entry) override { return held_.answered_at(entry); }

  // AttemptStore
  Capabilities capabilities() const override;
  Expected<std::optional<store::LedgerTask>> find(const Task& task, const std::string& sha256) override;
  Expected<std::optional<store::StoredResult>> kept_result(std::int64_t) override {
    return std::optional<store::StoredResult>{};
  }
  Expected<std::string> record_payload(const std::string&) override {
    return Error{"a stream's dead letters are not taken back"};
  }
  void add(LedgerWrite write) override;
  // An ok is settled at once (one fenced step): nothing is held back.
  void add_ok(std::int64_t, LedgerWrite write, bool, Clock::time_point) override { add(std::move(write)); }
  Expected<BatchResult> apply(std::vector<StartAttempt> starts, bool release_held, Commit when,
                              Clock::time_point now) override;
  Status commit_turn() override { return Status::ok(); }
  bool turn_open() const override { return false; }
  bool has_unapplied() const override;
  bool idle() const override;
  std::vector<int> wait_fds() const override;
  std::optional<Clock::time_point> due_by() const override { return std::nullopt; }
  std::string stopping() const override { return stopping_why_; }

  // The links' state changes come here (BrokerLink::StateChange).
  void on_redis_state(bool up, const std::string& what);

 private:
  class Intake final : public TaskSource {
   public:
    explicit Intake(StreamBackEnd& back_end) : back_end_(back_end) {}
    Item next() override { return back_end_.next_entry(); }
    std::vector<int> wait_fds() const override { return back_end_.intake_fds(); }

   private:
    StreamBackEnd& back_end_;
  };

  // An entry this worker holds, from its delivery until it is settled or
  // released.
  struct Held : HeldEntry {
    std::int64_t task_id = 0;     // the engine's name for it (find)
    std::uint64_t ref = 0;        // the engine's ref, from its first start (0: not handed to the engine)
    std::int64_t started_at = 0;  // the delivery its latest attempt started at (0: none)
    std::int64_t start_recorded = 0;  // the delivery whose start marker is recorded (a suspect's)
    std::optional<RecordedDelivery> last_end;  // its latest attempt's end (an ok's result says it)
    // The delivery each attempt's end was recorded at, by the engine's
    // attempt number (its count at the start): they differ when the
    // worker's own claim scan took the entry back while it ran.
    std::map<std::uint32_t, std::uint32_t> ended_at;
    bool handed = false;          // the intake gave it to the engine
  };
  // The entries held, shared with the writer link's renewal (its own thread).
  struct Claims {
    std::mutex mutex;
    std::set<std::string> held;
  };

  TaskSource::Item next_entry();
  // The links' fds, and intake_news_'s.
  std::vector<int> intake_fds() const;
  // A read or claim answered outside next_entry() (drained by apply()):
  // the engine's wait on the intake ends, so that it asks again.
  void tell_intake();
  void read_more(Clock::time_point now);
  void admit(Delivery d, bool claimed);
  // XAUTOCLAIM gave back an entry this worker holds (its renewal came late):
  // still its own; only the delivery count moved.
  void claimed_again(Held& h, const Delivery& d);
  void start(const StartAttempt& s);
  void answer_start(const Held& h);
  // Posts a fenced step (stream_protocol.h) on `h`'s entry to the writer:
  // `step(redis, keys, consumer, entry)` returns Expected<optional<T>>,
  // nullopt when the entry was no longer held (why_not_held then asks why).
  // Its answer: a Redis error leaves the entry pending, an entry not held is
  // lost, else `then(h, T)`. One released meanwhile is let be, though with
  // `error_if_released` its error still stops the worker.
  template <typename Step, typename Then>
  void post_fenced(const Held& h, bool error_if_released, Step step, Then then);
  // Dead-letters the entry unrun, for `refused` (counted when a protocol error).
  void refuse(Held& h, const Refused& refused);
  // A step on the entry failed on a Redis error (not a lost connection):
  // the worker stops, and the entry is left pending, its delivery recorded
  // as released when it ran.
  void left_pending(std::int64_t task_id, const std::string& error);
  // Records `d` in the entry's history (fenced); not held: lost.
  void record(Held& h, const RecordedDelivery& d);
  void settle_ok(Held& h, const Outcome& outcome);
  // Settles the entry to NAME:dlq. `unrun`: the intake's own refusal, told
  // to the sink here; else the engine's verdict, answered.
  void dead_letter(Held& h, const Outcome& outcome, const std::string& reason, bool unrun);
  // Read, not run: released as the worker stops (told to the sink, recorded
  // as not run).
  void release_unstarted(std::int64_t task_id);
  // Left for the fleet unsettled: its delivery recorded with `note` unless
  // its end is, then released.
  void give_back(std::int64_t task_id, const std::string& note);
  // No longer renewed and forgotten here: left pending (or settled) for the fleet.
  void release(std::int64_t task_id);
  // The entry is no longer this worker's (`why`): the engine loses it, or
  // the sink hears it was taken over before the engine had it.
  void lose(std::int64_t task_id, const std::string& why, LostAs as = LostAs::kTakenOver);
  void on_error(const std::string& message);
  // After an outage: asks Redis for its run id; a new one is a restart
  // (server_restart.h). Until the answer, nothing is read, and errors wait
  // (a missing group is the restart's doing, not an error of its own).
  // False when there is nothing to check (no run id known).
  bool check_restart();
  // Says Redis is back, once no link is down (after the restart check).
  void end_outage();
  void on_server_state(const Expected<ServerState>& state, const std::string& where);
  // Reading resumes; the errors that waited are raised now.
  void end_restart_check();
  // SIGINT/SIGTERM caught: stop reading.
  void check_signals();
  Held* held(std::int64_t task_id) { return held_.find(task_id); }
  std::int64_t wall_ms() const;

  WorkerSettings settings_;
  BrokerLink& reader_;
  BrokerLink& writer_;
  WorkerSink& out_;
  Intake intake_{*this};
  std::shared_ptr<Claims> claims_ = std::make_shared<Claims>();
  UniqueFd intake_news_;  // eventfd: readable once tell_intake() was called, until next_entry()
  bool in_next_entry_ = false;

  HeldTasks<Held> held_;  // known by their entry ids
  // Entries lost after the engine took them and before their first start:
  // (entry id, how), by task id, answered at that start.
  std::map<std::int64_t, std::pair<std::string, TaskLost>> lost_before_start_;
  std::vector<LedgerWrite> writes_;     // added since the last apply
  BatchResult answers_;                 // Redis's answers, for the next apply
  bool read_outstanding_ = false;
  bool claim_outstanding_ = false;
  std::string claim_cursor_ = "0-0";
  Clock::time_point next_claim_at_{};
  // No claim scans while the engine holds tasks for a suspected handler
  // outage here, or gave them back for one, until a task succeeds here: a
  // worker that cannot run its own entries takes none over from others,
  // and would take back those it gave away (their counts rising each
  // time). Fresh entries are still read: probes run on them.
  bool claims_paused_ = false;
  Clock::time_point last_activity_{};
  bool intake_started_ = false;
  bool stopping_ = false;
  std::string stopping_why_;            // stopping(): "" until the worker stops reading
  StopSignals stop_signals_;
  std::size_t redis_down_ = 0;          // links whose connection is lost now
  bool outage_open_ = false;            // said lost, not yet said back
  Clock::time_point outage_since_{};
  WrittenEntries results_written_;      // what a restart may have lost (server_restart.h)
  WrittenEntries dead_letters_written_;
  bool restart_check_pending_ = false;  // check_restart asked, or the group is being made anew
  std::vector<std::string> deferred_errors_;  // errors that came while it was pending
  WorkerReport report_;
};

}  // namespace pillbox::broker
