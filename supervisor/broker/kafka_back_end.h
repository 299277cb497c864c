#pragma once
// Kafka as a back end of the attempt engine (supervisor/flow/task_flow.h):
// the engine decides, this records on the cluster (docs/distributed.md,
// Kafka; docs/architecture.md, Adding a back end).
//
// Kafka keeps no delivery count, so the count is the attempt log
// (T.pillbox-attempts, kafka_attempt_entry.h): before a record's task
// runs, its start entry is written and acknowledged (acks=all); its end
// when the attempt ends; its settled entry once the result (T.results) or
// the dead letter (T.dlq) is acknowledged. Then the group's offset is
// committed, never past a record that is not settled
// (kafka_commit_tracker.h), with the commit's metadata naming where the
// next owner reads the attempt log from (kafka_attempts.h). A record whose
// retry waits stays held here, in the engine's schedule; the records
// behind it run meanwhile.
//
// No link thread: librdkafka runs its connections on threads of its own,
// and its queues raise fds the dispatcher waits on
// (kafka_group_consumer.h, kafka_producer.h). The calls that wait run
// inside a rebalance only: the revoke writes an uncharged end for each task
// of the partitions taken away that it started ("released: partition
// revoked") and waits for it, so the next owner reads it; the assign reads
// the attempt log's window of each partition given (bounded).
//
// At least once: no transactions (the mock cluster the tests run on does
// not honour them, docs/distributed.md). A worker killed after a result or
// dead letter was acknowledged and before its settled entry was runs it
// again: what pillbox produces about a record carries pillbox.dedupe.
#include <chrono>
#include <cstdint>
#include <deque>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "shared/unique_fd.h"
#include "supervisor/broker/held_tasks.h"
#include "supervisor/broker/kafka_attempt_log.h"
#include "supervisor/broker/kafka_attempts.h"
#include "supervisor/broker/kafka_commit_tracker.h"
#include "supervisor/broker/kafka_group_consumer.h"
#include "supervisor/broker/kafka_lag.h"
#include "supervisor/broker/kafka_message.h"
#include "supervisor/broker/kafka_producer.h"
#include "supervisor/broker/stream_entry.h"
#include "supervisor/broker/worker_settings.h"
#include "supervisor/exec/stop_signals.h"
#include "supervisor/flow/attempt_store.h"

namespace pillbox::broker {

struct KafkaWorkerSettings {
  // keys.stream is the topic T (its results T.results, dead letters T.dlq);
  // consumer.group the consumer group, consumer.name this worker.
  WorkerSettings worker;
  // librdkafka's properties every client of the worker takes
  // (bootstrap.servers, client.id, ...).
  std::vector<std::pair<std::string, std::string>> properties;
  // The attempt log's reader (the assign's window).
  AttemptLogSettings attempt_log;
  // Settled records held uncommitted behind one that is not (a retry that
  // waits) before its partition is paused.
  std::size_t max_uncommitted = 10'000;
  // Commits at most this often (and on a revoke, and at the end).
  std::chrono::milliseconds commit_every{200};
  // How long the revoke waits for its release entries and commit.
  std::chrono::milliseconds revoke_wait{10'000};
  // The consumer group's session.timeout.ms: a worker that died is out of
  // the group (its partitions go to the others) after this long.
  std::chrono::milliseconds session_timeout{10'000};
  // --behind-after: a partition whose commit has waited, or whose lag has
  // grown, this long is said to be behind (kafka_lag.h).
  std::chrono::milliseconds behind_after{30'000};
  // Each sample of the assigned partitions' lag (once a second, or a
  // quarter of behind_after when shorter; on the dispatcher's thread):
  // what /metrics shows.
  std::function<void(const std::vector<KafkaPartitionLag>&)> on_lag;
};

class KafkaBackEnd final : public AttemptStore, public SettleCounts {
 public:
  // Subscribes (the group hands out partitions once the dispatcher turns).
  static Expected<std::unique_ptr<KafkaBackEnd>> open(KafkaWorkerSettings settings, WorkerSink& out);
  ~KafkaBackEnd() override;
  KafkaBackEnd(const KafkaBackEnd&) = delete;
  KafkaBackEnd& operator=(const KafkaBackEnd&) = delete;

  // The engine's inner TaskSource: the records consumed, checked. Each
  // task carries its record's place in T, "p@o" (Task::source_id).
  TaskSource& intake() { return intake_; }
  // Takes nothing new from now on; what is read and not started is left
  // for the partition's next owner (nothing of it is written).
  void stop_reading(const std::string& why);
  // Runs what came back from the cluster.
  void drain();
  // Nothing produced waits for its report.
  bool quiet() const;
  bool links_down() const { return false; }  // librdkafka reconnects by itself; its reports wait meanwhile
  // Commits what is settled and leaves the group (its partitions go to the
  // others at once, not after a session timeout).
  void close();
  const WorkerReport& report() const { return report_; }
  // SettleCounts
  std::int64_t answered_at(const std::string& entry) override { return held_.answered_at(entry); }

  // AttemptStore
  Capabilities capabilities() const override;
  Expected<std::optional<store::LedgerTask>> find(const Task& task, const std::string& sha256) override;
  Expected<std::optional<store::StoredResult>> kept_result(std::int64_t) override {
    return std::optional<store::StoredResult>{};
  }
  Expected<std::string> record_payload(const std::string&) override {
    return Error{"a Kafka dead letter is not taken back"};
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
  // The next sample of the lag: a turn comes then even while every slot
  // runs a long task.
  std::optional<Clock::time_point> due_by() const override;
  std::string stopping() const override { return stopping_why_; }

 private:
  class Intake final : public TaskSource {
   public:
    explicit Intake(KafkaBackEnd& back_end) : back_end_(back_end) {}
    Item next() override { return back_end_.next_record(); }
    std::vector<int> wait_fds() const override { return back_end_.intake_fds(); }

   private:
    KafkaBackEnd& back_end_;
  };

  // A record this worker holds, from its read until it is settled, left or
  // its partition taken away.
  struct Held : HeldEntry {
    KafkaMessage message;            // as read; its value moved into task.payload
    std::int64_t task_id = 0;
    std::uint64_t ref = 0;           // the engine's, from its start (0: not started)
    std::uint64_t generation = 0;    // its partition's assignment it came in
    bool handed = false;             // the intake gave it to the engine
    bool null_value = false;         // a tombstone: its dead letter's value is null too
    bool started = false;            // its start entry is written (a start without an end: it runs)
    bool settling = false;           // its result or dead letter is on its way
    std::optional<RecordedDelivery> last_end;
    Outcome verdict_outcome;         // a refusal's, for the verdict told here
  };
  struct Partition {
    PartitionAttempts attempts;
    KafkaCommitTracker tracker;
    std::uint64_t generation = 0;
    bool held_back = false;          // paused: too many settled behind a held record
  };

  static std::string source_of(std::int32_t partition, std::int64_t offset);
  TaskSource::Item next_record();
  std::vector<int> intake_fds() const;
  void tell_intake();
  Held* held(std::int64_t task_id) { return held_.find(task_id); }
  std::int64_t wall_ms() const;
  void check_signals();
  void on_error(const std::string& message);

  KafkaBackEnd(KafkaWorkerSettings settings, WorkerSink& out);
  // The consumer's rebalance handlers.
  void on_revoke(const std::vector<std::int32_t>& partitions);
  std::set<std::int32_t> on_assign(const std::map<std::int32_t, KafkaCommitted>& partitions);
  // Reads the records the consumer has, while the engine may want more.
  void admit_records();
  void admit(KafkaMessage m);

  void start(const StartAttempt& s);
  // Writes an entry about `h`'s record; `then` runs once it is acknowledged
  // (true) or could not be (false).
  void write_entry(const Held& h, AttemptEntry entry, std::function<void(bool)> then);
  // Produces `out` (a result, a dead letter; none: nothing), then the
  // settled entry, then tells the engine as `how`.
  enum class Settled { kOk, kDeadLetter, kRefused };
  void settle(Held& h, std::optional<KafkaOutgoing> out, Settled how, const std::string& detail);
  void settled(std::int64_t task_id, Settled how, const std::string& where, const std::string& detail);
  void dead_letter(Held& h, const Outcome& outcome, const std::string& reason, bool unrun);
  // Its attempt ran and did not end it here (gave up, an outage, the worker
  // stops): an uncharged end is written when it was started, and it is
  // read again (`again`) or left to the partition's next owner.
  void leave(std::int64_t task_id, const std::string& note, bool again);
  // An uncharged end of its delivery that did not run to its end here.
  RecordedDelivery release_of(const Held& h, const std::string& note) const;
  // `stop_child`: its child, if one runs, is killed (another member runs it now).
  void lose(std::int64_t task_id, const std::string& why, LostAs as = LostAs::kTakenOver, bool stop_child = false);
  void release(std::int64_t task_id);
  void commit_settled(bool now);
  void hold_back(std::int32_t partition);
  // The lag of each assigned partition, to on_lag and the lag watch's
  // notices; at most once a lag_every().
  void sample_lag();
  std::chrono::milliseconds lag_every() const;
  // What keeps the partition's commit where it is, for the notice.
  std::string holding(const Held& h) const;

  KafkaWorkerSettings settings_;
  WorkerSink& out_;
  std::unique_ptr<KafkaGroupConsumer> consumer_;
  std::unique_ptr<KafkaProducer> producer_;
  std::unique_ptr<AttemptLogReader> log_reader_;
  Intake intake_{*this};
  UniqueFd intake_news_;
  bool in_next_ = false;

  std::map<std::int32_t, Partition> partitions_;
  std::uint64_t generations_ = 0;
  HeldTasks<Held> held_;
  // Records given back by the engine and kept (their partition is still
  // this worker's): read again before anything new.
  std::deque<KafkaMessage> read_again_;
  std::vector<LedgerWrite> writes_;
  BatchResult answers_;
  Clock::time_point last_commit_{};
  bool stopping_ = false;
  bool closed_ = false;
  std::string stopping_why_;
  Clock::time_point last_activity_{};
  // Between joining or a revoke and the group's next assignment: the
  // worker does not know its share yet (--exit-when-idle waits).
  bool awaiting_share_ = true;
  StopSignals stop_signals_;
  WorkerReport report_;
  KafkaLagWatch lag_watch_{settings_.behind_after};
  Clock::time_point last_lag_sample_{};
};

}  // namespace pillbox::broker
