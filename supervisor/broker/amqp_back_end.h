#pragma once
// RabbitMQ as a back end of the attempt engine (supervisor/flow/
// task_flow.h): the engine decides, this settles on the broker
// (docs/distributed.md, RabbitMQ; docs/architecture.md, Adding a back end).
//
// Two AmqpLinks, each a connection on a thread of its own: `consumer`
// consumes NAME (prefetch --prefetch: --jobs, or more, so that the next is
// here when a slot frees) and acknowledges; `publisher`
// publishes with confirms. A suspect (a message whose last delivery never
// reported back: it may be what killed a worker) runs alone, and nothing
// else is held beside it: the worker gives back what it holds unstarted,
// stops consuming until the suspect is settled, and gives back what comes
// meanwhile. Otherwise what it held would die with the worker each
// time a payload killed it, the broker counting a delivery of each, until
// good messages reached x-delivery-limit beside the killer. And no more
// than --jobs settles are under way at once: a kill cuts each (it runs
// again), so a deeper prefetch adds no duplicates. Every settle is
// publish, confirmed, then ack (amqp_entry.h): the ok's result (to its
// reply_to, or NAME.results; a replayed message's notice to NAME.dlq.state
// before it), the dead letter (NAME.dlx), the copy that
// carries the history on, to NAME.delay.MS for a retry's wait (the task
// leaves this worker: it holds no slot and no message while it waits) or
// back to NAME when the worker gives it back. A crash between the confirm
// and the ack delivers the message again: at least once, never lost.
//
// A message the broker takes back (the consumer's connection lost) is lost
// to the engine (TaskLost); its next delivery counts it (x-delivery-count).
#include <atomic>
#include <chrono>
#include <cstdint>
#include <deque>
#include <map>
#include <memory>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "shared/unique_fd.h"
#include "supervisor/broker/held_tasks.h"
#include "supervisor/broker/amqp_entry.h"
#include "supervisor/broker/amqp_link.h"
#include "supervisor/broker/worker_settings.h"
#include "supervisor/exec/stop_signals.h"
#include "supervisor/flow/attempt_store.h"

namespace pillbox::broker {

struct AmqpWorkerSettings {
  WorkerSettings worker;  // keys.stream NAME, keys.results NAME.results, keys.dlq NAME.dlq
  // Longest wait of one consume call before the link looks at its work again.
  std::chrono::milliseconds consume_wait{1000};
  // The consume's prefetch (--prefetch): at least worker.jobs.
  std::size_t prefetch = 1;
};

// --prefetch's default: --jobs (why: its definition).
std::size_t default_amqp_prefetch(std::size_t jobs);

class AmqpBackEnd final : public AttemptStore, public SettleCounts {
 public:
  // The links and the sink are not owned and outlive the back end; the
  // links stop before it goes. The consumer link consumes already (its Setup).
  AmqpBackEnd(AmqpWorkerSettings settings, AmqpLink& consumer, AmqpLink& publisher, WorkerSink& out);
  ~AmqpBackEnd() override;
  AmqpBackEnd(const AmqpBackEnd&) = delete;
  AmqpBackEnd& operator=(const AmqpBackEnd&) = delete;

  // The engine's inner TaskSource: the messages consumed, checked. Each
  // task carries its message's name (Task::source_id).
  TaskSource& intake() { return intake_; }
  // Takes nothing new from now on: the consume is cancelled, and what was
  // delivered and not yet the engine's is given back (copied back to NAME
  // with its release recorded, then acknowledged).
  void stop_reading(const std::string& why);
  // Runs the links' answers that came back.
  void drain();
  // Every step posted to the broker answered.
  bool quiet() const;
  // A link's connection is lost now.
  bool links_down() const { return links_down_ > 0; }
  const WorkerReport& report() const { return report_; }
  // SettleCounts: the delivery at which a message was settled or lost, once.
  std::int64_t answered_at(const std::string& entry) override { return held_.answered_at(entry); }

  // The links' state changes come here.
  void on_link_state(bool consumer, bool up, const std::string& what);
  // A message the consumer link's idle work received on connection `connection`.
  void admit(AmqpMessage m, std::uint64_t connection);

  // AttemptStore
  Capabilities capabilities() const override;
  Expected<std::optional<store::LedgerTask>> find(const Task& task, const std::string& sha256) override;
  Expected<std::optional<store::StoredResult>> kept_result(std::int64_t) override {
    return std::optional<store::StoredResult>{};
  }
  Expected<std::string> record_payload(const std::string&) override {
    return Error{"a RabbitMQ dead letter is not taken back"};
  }
  void add(LedgerWrite write) override { writes_.push_back(std::move(write)); }
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

 private:
  class Intake final : public TaskSource {
   public:
    explicit Intake(AmqpBackEnd& back_end) : back_end_(back_end) {}
    Item next() override { return back_end_.next_message(); }
    std::vector<int> wait_fds() const override { return back_end_.intake_fds(); }

   private:
    AmqpBackEnd& back_end_;
  };

  // A message this worker holds, from its delivery until it is settled,
  // given back or taken back by the broker.
  struct Held : AmqpHeld {
    std::int64_t task_id = 0;
    std::uint64_t ref = 0;           // the engine's, from its first start (0: not started)
    std::uint64_t connection = 0;    // the consumer connection it came on (its tag is that one's)
    bool handed = false;             // the intake gave it to the engine
    bool settling = false;           // a settle is on its way: nothing more is done with it
    std::string settle_detail;       // what it says (a retry's: where it waits)
    std::optional<RecordedDelivery> last_end;  // its attempt's end, as recorded
    Outcome verdict_outcome;         // a dead letter's outcome, for the verdict told here (unrun)
    bool outage_held = false;        // held unacknowledged for a handler outage, not started since
  };
  // What a settle does, for the answer.
  enum class Settled {
    kOk,          // the result published (if any)
    kDeadLetter,  // the engine's verdict
    kRefused,     // dead-lettered unrun by the intake
    kRetry,       // a copy waits in a delay queue
    kGiveBack,    // a copy back to NAME, for another worker
  };

  TaskSource::Item next_message();
  std::vector<int> intake_fds() const;
  void tell_intake();
  Held* held(std::int64_t task_id) { return held_.find(task_id); }
  std::int64_t wall_ms() const;
  void check_signals();
  void on_error(const std::string& message);
  // basic.cancel on the consuming connection; what it delivered meanwhile
  // is given back (admit, while stopping).
  void cancel_consume();

  void start(const StartAttempt& s);
  // Publishes `ps` in order, each confirmed before the next, then
  // acknowledges the message and answers the engine as `how`, told as the
  // last that is no notice (none: ""). A refused publish stops the rest,
  // leaves the message unacked (the broker delivers it again) and stops
  // the worker, except a result, which is said and settled all the same
  // (its requester went away), and one that can never be sent, rejected
  // (the broker dead-letters the message whole); a notice refused, for
  // whatever reason, always stops it. With `delay_bucket`, its delay queue
  // is declared first (when first used).
  void settle(Held& h, std::vector<AmqpPublication> ps, Settled how, const std::string& detail = "",
              std::chrono::milliseconds delay_bucket = std::chrono::milliseconds(0));
  // Acks the message (or, `reject`, rejects it unrequeued: the broker
  // dead-letters it itself) on the connection it came on, then counts
  // and tells it as `how`.
  void acknowledge(std::int64_t task_id, Settled how, const std::string& added, const std::string& detail,
                   bool reject = false);
  void dead_letter(Held& h, const Outcome& outcome, const std::string& reason, bool unrun);
  // Copies it back to NAME with `note` recorded for its delivery (unless its end is), then acks.
  void give_back(std::int64_t task_id, const std::string& note);
  // The engine's retry: a copy to the delay queue for `wait`, then ack.
  void retry_later(std::int64_t task_id, std::chrono::milliseconds wait);
  // Its attempt's end at this delivery, else a release with `note`.
  RecordedDelivery ended_or_released(const Held& h, const std::string& note) const;
  void release(std::int64_t task_id);
  void lose(std::int64_t task_id, const std::string& why, LostAs as = LostAs::kTakenOver);
  // Suspect `task_id` runs alone: what is held unstarted is given back and
  // the consume paused until it has run or is settled (the header says why).
  void run_alone(std::int64_t task_id);
  // The suspect may start: the consume's pause answered, and nothing held
  // but it and what the engine runs.
  bool alone_now() const;
  // Held messages whose settle is on its way (published, not yet acknowledged).
  std::size_t settles_under_way() const;
  // What the consume loop makes of a connection that has no consume (see
  // wanted_prefetch_), on the consumer link's thread: consumes with the
  // prefetch wanted; the worker stops when the broker refuses it.
  AmqpLink::Done restore_consume(AmqpConnection& c);
  // The consume as it should be: paused while a suspect is held; else on,
  // with a prefetch of --prefetch plus the messages held for a handler
  // outage. Those stay unacknowledged and take the broker's prefetch slots,
  // and with --jobs of them nothing new came: the breaker, with no payload
  // known to work, probes with the next fresh one, and none ever came (the
  // worker waited --breaker-max-wait, then gave them back). Consumed again
  // when that changes.
  void sync_consume();

  AmqpWorkerSettings settings_;
  AmqpLink& consumer_;
  AmqpLink& publisher_;
  WorkerSink& out_;
  Intake intake_{*this};
  UniqueFd intake_news_;
  bool in_next_ = false;

  HeldTasks<Held> held_;
  // The delay queues declared (their buckets, ms): the publisher link's own.
  std::shared_ptr<std::set<std::int64_t>> declared_delays_ = std::make_shared<std::set<std::int64_t>>();
  std::vector<LedgerWrite> writes_;
  BatchResult answers_;
  std::size_t links_down_ = 0;
  std::size_t prefetch_asked_ = 0;  // 0: as the consuming link's Setup asked (--prefetch)
  bool consume_paused_ = false;     // cancelled while a suspect runs alone
  bool pause_answered_ = true;      // the broker answered that cancel
  std::uint64_t pauses_posted_ = 0;   // the last pause's number (its answer alone is awaited)
  // The prefetch the worker consumes with, 0 while it wants no consume (a
  // suspect alone, or stopping): set on the owner's thread before the work
  // that pauses or resumes is posted, read by the consume loop on the
  // consumer link's thread, which consumes again on a connection left
  // without a consume the worker wants (restore_consume).
  std::shared_ptr<std::atomic<std::uint16_t>> wanted_prefetch_ = std::make_shared<std::atomic<std::uint16_t>>(0);
  std::int64_t alone_ = 0;          // the suspect held alone (0: none)
  bool cancel_answered_ = false;      // the consume is cancelled (stop_reading)
  bool stopping_ = false;
  std::string stopping_why_;
  bool intake_started_ = false;
  Clock::time_point last_activity_{};
  StopSignals stop_signals_;
  WorkerReport report_;
};

}  // namespace pillbox::broker
