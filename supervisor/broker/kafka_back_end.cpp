#include "supervisor/broker/kafka_back_end.h"

#include <poll.h>
#include <sys/eventfd.h>
#include <unistd.h>

#include <algorithm>
#include <utility>
#include <variant>

#include "supervisor/broker/kafka_config.h"
#include "supervisor/broker/kafka_dead_letter.h"
#include "supervisor/broker/kafka_record_fit.h"
#include "supervisor/broker/kafka_result.h"
#include "supervisor/io/terminal_text.h"

namespace pillbox::broker {

std::string KafkaBackEnd::source_of(std::int32_t partition, std::int64_t offset) {
  // "p@o": the record's place in T, as its result and dead letter name it
  // (source_entry); unique among what one worker of one topic holds.
  return std::to_string(partition) + "@" + std::to_string(offset);
}

Expected<std::unique_ptr<KafkaBackEnd>> KafkaBackEnd::open(KafkaWorkerSettings settings, WorkerSink& out) {
  std::unique_ptr<KafkaBackEnd> self(new KafkaBackEnd(std::move(settings), out));
  KafkaBackEnd* me = self.get();
  const WorkerSettings& worker = me->settings_.worker;
  auto reader = AttemptLogReader::open(me->settings_.attempt_log);
  if (!reader) return Error{reader.error(), reader.error_code()};
  me->log_reader_ = std::move(*reader);
  // Records up to what a default broker takes (librdkafka's own limit is
  // 1000000): results are fitted to it (kafka_result.h).
  auto producer_properties = me->settings_.properties;
  producer_properties.emplace_back("message.max.bytes", std::to_string(kKafkaBrokerMessageMaxBytes));
  auto producer = KafkaProducer::open(std::move(producer_properties));
  if (!producer) return Error{producer.error(), producer.error_code()};
  me->producer_ = std::move(*producer);
  KafkaConsumerSettings cs;
  cs.properties = me->settings_.properties;
  cs.properties.emplace_back("session.timeout.ms", std::to_string(me->settings_.session_timeout.count()));
  cs.properties.emplace_back("heartbeat.interval.ms",
                             std::to_string(std::max<std::int64_t>(me->settings_.session_timeout.count() / 5, 100)));
  cs.topic = worker.keys.stream;
  cs.group = worker.consumer.group;
  // Read ahead (kafka_group_consumer.h: 512 records, 32 MiB, resumed at
  // half): a slot that comes free finds its next record here, and
  // librdkafka's fetches are not cut short every few records.
  cs.max_buffered = std::max<std::size_t>(512, 4 * worker.jobs);
  KafkaGroupConsumer::Handlers h;
  h.on_revoke = [me](const std::vector<std::int32_t>& partitions) { me->on_revoke(partitions); };
  h.on_assign = [me](const std::map<std::int32_t, KafkaCommitted>& partitions) { return me->on_assign(partitions); };
  h.on_committed = [me](const Status& result) {
    if (!result) me->out_.on_notice("warning: " + result.message() + " (the next commit covers it)");
  };
  h.on_notice = [me](const std::string& what) { me->out_.on_notice("Kafka: " + what); };
  auto consumer = KafkaGroupConsumer::open(std::move(cs), std::move(h));
  if (!consumer) return Error{consumer.error(), consumer.error_code()};
  me->consumer_ = std::move(*consumer);
  return self;
}

KafkaBackEnd::KafkaBackEnd(KafkaWorkerSettings settings, WorkerSink& out)
    : settings_(std::move(settings)), out_(out), intake_news_(::eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK)) {}

KafkaBackEnd::~KafkaBackEnd() { close(); }

std::int64_t KafkaBackEnd::wall_ms() const {
  return std::chrono::duration_cast<std::chrono::milliseconds>(std::chrono::system_clock::now().time_since_epoch())
      .count();
}

AttemptStore::Capabilities KafkaBackEnd::capabilities() const {
  Capabilities c;
  c.keeps_records = true;          // dead letters
  c.takes_back = false;            // a dead letter given stands
  c.can_stop = false;              // nothing would run what the worker's partitions hold
  c.merges_repeats = false;        // every record is settled, twins too
  c.tells_ok_when_settled = true;  // an ok is told once its settled entry is acknowledged
  return c;
}

void KafkaBackEnd::drain() {
  if (producer_) producer_->drain();
  if (consumer_ && !closed_) consumer_->pump();
}

bool KafkaBackEnd::quiet() const { return !producer_ || producer_->outstanding() == 0; }

std::vector<int> KafkaBackEnd::wait_fds() const {
  std::vector<int> fds;
  if (producer_) fds.push_back(producer_->wait_fd());
  if (consumer_ && !closed_) fds.push_back(consumer_->wait_fd());
  return fds;
}

std::vector<int> KafkaBackEnd::intake_fds() const {
  std::vector<int> fds = wait_fds();
  if (intake_news_.valid()) fds.push_back(intake_news_.get());
  return fds;
}

void KafkaBackEnd::tell_intake() {
  if (in_next_ || !intake_news_.valid()) return;
  const std::uint64_t one = 1;
  (void)!::write(intake_news_.get(), &one, sizeof one);
}

void KafkaBackEnd::check_signals() {
  if (const int sig = stop_signals_.caught(); sig != 0 && !stopping_) {
    report_.stop_signal = sig;
    stop_reading(stop_signal_name(sig));
  }
}

void KafkaBackEnd::on_error(const std::string& message) {
  if (report_.error.empty()) report_.error = message;
  stop_reading("a Kafka error: " + message);
}

void KafkaBackEnd::stop_reading(const std::string& why) {
  if (stopping_) return;
  stopping_ = true;
  stopping_why_ = why;
  out_.on_notice("stopping (" + why +
                 "): what runs finishes, nothing new is taken, records not started are left to the partitions' next owners");
  for (std::int64_t id : held_.take_queue()) leave(id, "released: the worker is stopping", false);
  tell_intake();
}

void KafkaBackEnd::close() {
  if (closed_ || !consumer_) return;
  commit_settled(true);
  // Leaving the group runs the revoke (on_revoke): what is still held is
  // released there, and the group rebalances at once.
  consumer_->close();
  closed_ = true;
  if (producer_) producer_->flush(static_cast<int>(settings_.revoke_wait.count()));
}

// ---- rebalances ----

void KafkaBackEnd::on_revoke(const std::vector<std::int32_t>& partitions) {
  const std::set<std::int32_t> gone(partitions.begin(), partitions.end());
  // What this worker settled is committed before another member starts
  // from the committed offset (it would skip it by its settled entry all
  // the same: this spares it the reading).
  commit_settled(true);
  std::vector<std::int64_t> ids;
  for (const auto& [id, h] : held_.all()) {
    if (gone.count(h.message.partition) > 0) ids.push_back(id);
  }
  for (std::int64_t id : ids) {
    Held& h = *held(id);
    if (h.started && !h.settling) {
      // Written before the group hands the partition on (the rebalance
      // waits for this revoke): the next owner reads that this delivery
      // ended, uncharged, and does not count it as one that never reported back.
      const auto end = release_of(h, "released: partition revoked (a rebalance)");
      write_entry(h, attempt_end(h.message.partition, h.message.offset, end), nullptr);
    }
  }
  if (producer_ && !producer_->flush(static_cast<int>(settings_.revoke_wait.count()))) {
    out_.on_notice("warning: the attempt log did not acknowledge the releases of the partitions taken away within " +
                   std::to_string(settings_.revoke_wait.count()) +
                   " ms: their next owner may count a delivery that never reported back");
  }
  // A task that runs here is stopped: its next owner runs it from the
  // start, and two runs side by side would do its work twice at once.
  for (std::int64_t id : ids) {
    lose(id, "its partition was taken away (a rebalance): the next owner runs it", LostAs::kTakenOver,
         /*stop_child=*/true);
  }
  for (std::int32_t p : partitions) partitions_.erase(p);
  awaiting_share_ = true;
  if (!partitions.empty()) {
    std::string list;
    for (std::int32_t p : partitions) list += (list.empty() ? "" : ",") + std::to_string(p);
    out_.on_notice("partitions " + list + " taken away (a rebalance)");
  }
}

std::set<std::int32_t> KafkaBackEnd::on_assign(const std::map<std::int32_t, KafkaCommitted>& partitions) {
  std::set<std::int32_t> paused;
  std::string list;
  for (const auto& [p, committed] : partitions) {
    list += (list.empty() ? "" : ",") + std::to_string(p);
    if (!committed.known) {
      // Not run before it is known (from 0, it would run settled records
      // again), and never known here: nothing asks again, and the group
      // would leave it with this member, paused, until the next rebalance.
      // The worker stops and leaves the group, which hands the partition to
      // a member that can read it (or to this one, started again).
      paused.insert(p);
      on_error("cannot read what the group committed for partition " + std::to_string(p) +
               ": its records are not run before it is known; start the worker again");
      continue;
    }
    // The attempt log's window: every entry about a record from the
    // committed offset on, so that each record's history is known and a
    // record settled past it (its neighbour held for a retry) is not run again.
    const AttemptLogStart from = parse_attempt_commit_metadata(committed.metadata);
    auto read = log_reader_->read(p, from.from);
    if (!read) {
      out_.on_notice("cannot read the attempt log of partition " + std::to_string(p) + ": " + read.error() +
                     "; the partition is not read until the worker starts again");
      paused.insert(p);
      on_error("cannot read the attempt log of partition " + std::to_string(p) + ": " + read.error());
      continue;
    }
    if (committed.offset >= 0 && !from.from && committed.metadata.size() > 0) out_.on_notice(from.why_beginning);
    if (!read->note.empty()) out_.on_notice("partition " + std::to_string(p) + ": " + read->note);
    Partition part{fold_attempt_log(p, std::max<std::int64_t>(committed.offset, 0), read->entries, read->end,
                                    read->source_end, settings_.worker.consumer.group),
                   KafkaCommitTracker(committed.offset), ++generations_, false};
    if (part.attempts.unreadable > 0) {
      out_.on_notice("partition " + std::to_string(p) + ": " + std::to_string(part.attempts.unreadable) +
                     " attempt-log entries are not pillbox's, not counted (first: " +
                     table_cell(part.attempts.first_unreadable, 300) + ")");
    }
    partitions_.insert_or_assign(p, std::move(part));
  }
  if (!list.empty()) out_.on_notice("partitions " + list + " assigned");
  last_activity_ = Clock::now();  // --exit-when-idle counts from here
  awaiting_share_ = false;
  tell_intake();
  return paused;
}

// ---- intake ----

void KafkaBackEnd::admit_records() {
  if (stopping_ || closed_) return;
  // As many as the engine can start, and a few for the next free slot.
  const std::size_t want = settings_.worker.jobs + 1;
  std::set<std::int32_t> skip;
  for (const auto& [p, part] : partitions_) {
    if (part.held_back) skip.insert(p);
  }
  while (held_.queued() < want && !read_again_.empty()) {
    KafkaMessage m = std::move(read_again_.front());
    read_again_.pop_front();
    admit(std::move(m));
  }
  while (held_.queued() < want) {
    auto m = consumer_->next(skip);
    if (!m) break;
    admit(std::move(*m));
  }
}

void KafkaBackEnd::admit(KafkaMessage m) {
  auto pit = partitions_.find(m.partition);
  if (pit == partitions_.end()) return;  // a partition no longer this worker's
  Partition& part = pit->second;
  ++report_.deliveries;
  last_activity_ = Clock::now();
  part.tracker.read(m.offset);
  const RecordAttempts* known = part.attempts.find(m.offset);
  if (known != nullptr && known->settled) {
    // Settled by an earlier owner after the commit stopped before it: done.
    part.tracker.settled(m.offset);
    return;
  }
  Held& h = held_.hold();
  const std::int64_t id = h.task_id;
  h.generation = part.generation;
  h.id = source_of(m.partition, m.offset);
  held_.name(h, h.id);
  const RecordAttempts none;
  const RecordAttempts& attempts = known != nullptr ? *known : none;
  h.delivery = next_delivery(attempts);
  h.history = record_history(attempts);
  // Its key: the record's (as text, made safe where it is shown), else its place.
  h.task.key = m.key && !m.key->empty() ? *m.key : h.id;
  const std::string& handler = settings_.worker.identity.handler_identity;
  std::optional<Refused> refused;
  if (!m.value) {
    h.null_value = true;
    refused = Refused{protocol_error("record " + h.id + " has a null value (a tombstone?): no payload to run", handler),
                      "a record with a null value"};
  } else {
    h.task.payload = std::move(*m.value);
    m.value.reset();
    if (!refused) refused = oversized("payload", h.task.payload.size(), settings_.worker.max_payload, handler);
  }
  if (!refused && m.key) refused = oversized("key", m.key->size(), settings_.worker.max_key, handler);
  if (!refused && !judgeable(h.delivery)) {
    // Only entries written by hand get there (each delivery writes one):
    // its history is not read further, it is not run.
    refused = Refused{protocol_error("record " + h.id + " would be delivered for the " + std::to_string(h.delivery) +
                                         "th time: its attempt log says more than any fleet delivers",
                                     handler),
                      "delivery count out of range"};
  }
  if (!refused) refused = lost_too_often(settings_.worker, h);
  h.message = std::move(m);
  if (refused) {
    if (refused->protocol_error) ++report_.protocol_errors;
    return dead_letter(h, refused->outcome, refused->reason, /*unrun=*/true);
  }
  held_.queue(id);
}

TaskSource::Item KafkaBackEnd::next_record() {
  if (intake_news_.valid()) {
    std::uint64_t told = 0;
    (void)!::read(intake_news_.get(), &told, sizeof told);
  }
  in_next_ = true;
  drain();
  admit_records();
  in_next_ = false;
  check_signals();
  sample_lag();
  TaskSource::Item item;
  const auto now = Clock::now();
  if (!held_.empty()) last_activity_ = now;
  // Idle counts while the group has given this worker its share (none is a
  // share too, when there are more workers than partitions), from the
  // assignment on: not before the first, nor during a rebalance (its
  // partitions taken away, the next assignment not come yet). A rebalance
  // waits for a dead member until its session times out, and the group
  // then forms again: two session timeouts or more. A worker that counted
  // that time as idle left mid-rebalance, and when every member of the
  // group did, the records of the dead member's partitions waited for the
  // next worker to start (found by kafka_chaos_test).
  const bool holds_share = !awaiting_share_;
  if (settings_.worker.exit_when_idle && !stopping_ && holds_share && held_.none_queued() && consumer_->buffered() == 0 &&
      now - last_activity_ >= *settings_.worker.exit_when_idle) {
    stop_reading("nothing new for " + std::to_string(settings_.worker.exit_when_idle->count()) + " ms");
  }
  if (!held_.none_queued()) return held_.hand_first();
  if (stopping_) {
    item.type = TaskSource::Item::Type::kEnd;
    return item;
  }
  item.type = TaskSource::Item::Type::kWait;
  // Commits wait for a turn at most commit_every; idleness is looked at again by then.
  item.wake_at = now + settings_.commit_every;
  if (settings_.worker.exit_when_idle && holds_share) {
    item.wake_at = std::min(*item.wake_at, last_activity_ + *settings_.worker.exit_when_idle);
  }
  commit_settled(false);
  return item;
}

Expected<std::optional<store::LedgerTask>> KafkaBackEnd::find(const Task& task, const std::string&) {
  return held_.ledger_task(task.source_id, "record");
}

// ---- the engine's effects ----

bool KafkaBackEnd::has_unapplied() const {
  return !writes_.empty() || has_answers(answers_);
}

bool KafkaBackEnd::idle() const { return !has_unapplied() && quiet(); }

Expected<BatchResult> KafkaBackEnd::apply(std::vector<StartAttempt> starts, bool, Commit, Clock::time_point) {
  drain();
  check_signals();
  std::vector<LedgerWrite> writes = std::exchange(writes_, {});
  for (LedgerWrite& w : writes) {
    if (const auto* end = std::get_if<EndAttempt>(&w)) {
      Held* h = held(end->task_id);
      if (h == nullptr) continue;
      const auto delivery = static_cast<std::uint32_t>(h->delivery);
      h->last_end = end->outcome.kind == "interrupted"
                        ? recorded_release(delivery, settings_.worker.consumer.name, wall_ms(),
                                           "released: " + end->outcome.message)
                        : recorded_outcome(delivery, settings_.worker.consumer.name, wall_ms(), end->outcome,
                                           end->charged, end->transient);
      write_entry(*h, attempt_end(h->message.partition, h->message.offset, *h->last_end), nullptr);
    } else if (const auto* u = std::get_if<UnchargeAttempt>(&w)) {
      // An earlier failure the outage explains: uncharged here. (Its end
      // entry in the log says charged: a worker that dies before this
      // record is settled leaves that to the next owner.)
      Held* h = held(u->task_id);
      if (h == nullptr) continue;
      for (RecordedDelivery& d : h->history.recorded) {
        if (d.delivery == u->n && d.charged) {
          d.charged = false;
          d.note = "held: handler outage suspected";
        }
      }
      if (h->last_end && h->last_end->delivery == u->n) {
        h->last_end->charged = false;
        h->last_end->note = "held: handler outage suspected";
      }
    } else if (const auto* s = std::get_if<SetTaskWait>(&w)) {
      // A retry waits here, in the engine's schedule: its partition's
      // commit stops at it, the records behind it run on.
      if (Held* h = held(s->task_id)) hold_back(h->message.partition);
    } else if (const auto* k = std::get_if<KeepResult>(&w)) {
      Held* h = held(k->task_id);
      if (h == nullptr) continue;
      Outcome outcome = h->last_end ? outcome_of(*h->last_end) : Outcome{};
      outcome.kind = Kind::kOk;
      outcome.output = k->output;
      settle(*h, kafka_result(settings_.worker, *h, h->message, outcome), Settled::kOk, "");
    } else if (const auto* q = std::get_if<QuarantinePayload>(&w)) {
      Held* h = held(q->task_id);
      if (h == nullptr) continue;
      dead_letter(*h, q->outcome, q->reason, /*unrun=*/false);
    } else if (const auto* s = std::get_if<SetTaskState>(&w)) {
      // Gave up here (not the payload's fault): read again, as a fresh
      // delivery, after what waits.
      if (s->state == store::TaskState::kGaveUp) leave(s->task_id, "released: gave up here", !stopping_);
    } else if (const auto* r = std::get_if<ReleaseTask>(&w)) {
      leave(r->task_id, stopping_ ? "released: the worker is stopping" : "released: outage here", !stopping_);
    } else if (std::holds_alternative<ReleaseClaims>(w)) {
      std::vector<std::int64_t> ids;
      for (const auto& [id, h] : held_.all()) ids.push_back(id);
      for (std::int64_t id : ids) leave(id, "released: the worker is stopping", false);
    }
    // TakeBackRecord: never (takes_back is false).
  }
  for (const StartAttempt& s : starts) start(s);
  commit_settled(false);
  sample_lag();
  return std::exchange(answers_, BatchResult{});
}

void KafkaBackEnd::start(const StartAttempt& s) {
  Held* h = held(s.task_id);
  if (h == nullptr || stopping_) {
    answers_.lost.push_back({s.ref, h == nullptr ? "no longer held by this worker" : "the worker is stopping",
                             LostAs::kLeftPending});
    if (h != nullptr) lose(h->task_id, "the worker is stopping");
    return;
  }
  if (h->started) {
    // Its earlier attempt here ended (a retry held in the engine's
    // schedule): this one is the next delivery, the ended one in its history.
    if (h->last_end && h->last_end->delivery == h->delivery) h->history.recorded.push_back(*h->last_end);
    h->history.last_lost = false;
    ++h->delivery;
    h->started = false;
    if (!judgeable(h->delivery)) {
      answers_.lost.push_back({s.ref, "its delivery count is out of range", LostAs::kLeftPending});
      return lose(h->task_id, "its delivery count is out of range");
    }
  }
  h->ref = s.ref;
  // Its start entry first, acknowledged by the cluster: whoever reads this
  // record next counts this delivery, even if it kills this worker.
  const std::int64_t id = h->task_id;
  write_entry(*h,
              attempt_start(h->message.partition, h->message.offset, static_cast<std::uint32_t>(h->delivery),
                            settings_.worker.consumer.name, wall_ms()),
              [this, id](bool written) {
                Held* h = held(id);
                if (h == nullptr || h->ref == 0) return;
                if (!written) {
                  // Not run: a start that may not be counted must not reach a child.
                  on_error("cannot write the start of " + h->id + " to the attempt log");
                  return lose(id, "its start could not be written to the attempt log", LostAs::kLeftPending);
                }
                h->started = true;
                ++report_.attempts;
                answers_.started.push_back(
                    {h->ref, h->task_id, static_cast<std::uint32_t>(h->delivery), store::TaskState::kPending, ""});
                tell_intake();
              });
}

void KafkaBackEnd::write_entry(const Held& h, AttemptEntry entry, std::function<void(bool)> then) {
  entry.group = settings_.worker.consumer.group;
  const std::int32_t partition = h.message.partition;
  const std::uint64_t generation = h.generation;
  Status sent = producer_->produce(attempt_entry_record(settings_.worker.keys.stream, entry),
                                   [this, entry, partition, generation, then = std::move(then)](
                                       const Expected<KafkaDelivered>& d) {
                                     if (d) {
                                       auto it = partitions_.find(partition);
                                       if (it != partitions_.end() && it->second.generation == generation) {
                                         it->second.attempts.add(entry, d->offset);
                                       }
                                     } else {
                                       out_.on_notice("warning: " + d.error());
                                     }
                                     if (then) then(d.has_value());
                                   });
  if (!sent) {
    out_.on_notice("warning: " + sent.message());
    if (then) then(false);
  }
}

void KafkaBackEnd::settle(Held& h, std::optional<KafkaOutgoing> out, Settled how, const std::string& detail) {
  h.settling = true;
  const std::int64_t id = h.task_id;
  auto then_settled = [this, id, how, detail](const std::string& where) {
    Held* h = held(id);
    if (h == nullptr) return;
    KafkaSettlement settlement;
    settlement.how = how == Settled::kOk         ? KafkaSettlement::How::kOk
                     : how == Settled::kRefused ? KafkaSettlement::How::kRefused
                                                 : KafkaSettlement::How::kDeadLetter;
    settlement.where = where;
    write_entry(*h,
                attempt_settled(h->message.partition, h->message.offset, static_cast<std::uint32_t>(h->delivery),
                                settings_.worker.consumer.name, wall_ms(), settlement),
                [this, id, how, where, detail](bool written) {
                  if (!written) {
                    // Its result or dead letter is in; unsettled, it runs
                    // again under another owner (its copy deduplicated).
                    on_error("cannot write the settled entry of a record to the attempt log");
                    return lose(id, "its settled entry could not be written", LostAs::kLeftPending);
                  }
                  settled(id, how, where, detail);
                });
  };
  if (!out) return then_settled("");
  const std::string topic = out->topic;
  Status sent = producer_->produce(*out, [this, id, topic, then_settled](const Expected<KafkaDelivered>& d) {
    if (!d) {
      on_error(d.error());
      return lose(id, "what settles it was not written: " + d.error(), LostAs::kLeftPending);
    }
    then_settled(topic + " " + std::to_string(d->partition) + "@" + std::to_string(d->offset));
  });
  if (!sent) {
    // Never sendable (over the topic's limit, say): the worker cannot
    // settle it; it stops and says why.
    on_error(sent.message());
    lose(id, "what settles it could not be produced: " + sent.message(), LostAs::kLeftPending);
  }
}

void KafkaBackEnd::settled(std::int64_t task_id, Settled how, const std::string& where, const std::string& detail) {
  Held* h = held(task_id);
  if (h == nullptr) return;
  tell_intake();
  held_.answered(h->task.source_id, h->delivery);
  if (auto it = partitions_.find(h->message.partition); it != partitions_.end() && it->second.generation == h->generation) {
    it->second.tracker.settled(h->message.offset);
  }
  tell_settled(*h, how == Settled::kOk, how == Settled::kRefused, where, detail, answers_, report_, out_);
  release(task_id);
  commit_settled(false);
}

void KafkaBackEnd::dead_letter(Held& h, const Outcome& outcome, const std::string& reason, bool unrun) {
  h.verdict_outcome = outcome;
  // kafka_dead_letter fits it to the header it rides in.
  const std::string record = dead_letter_record(settings_.worker, h, outcome, reason, wall_ms(), "topic",
                                                kafka_record_source(h.message, settings_.worker.consumer.group));
  KafkaMessage original = h.message;
  // The original exact: a null value stays null (not the empty payload).
  if (!h.null_value) original.value = h.task.payload;
  settle(h, kafka_dead_letter(original, record, settings_.worker.fleet_key ? &*settings_.worker.fleet_key : nullptr),
         unrun ? Settled::kRefused : Settled::kDeadLetter, reason);
}

void KafkaBackEnd::leave(std::int64_t task_id, const std::string& note, bool again) {
  Held* h = held(task_id);
  if (h == nullptr || h->settling) return;
  held_.unqueue(task_id);
  if (!h->handed) {
    ++report_.released;
    out_.on_verdict(h->task, Outcome{},
                    WorkerVerdict{WorkerVerdict::Type::kReleased, h->task.source_id, h->delivery, "", note});
  }
  held_.answered(h->task.source_id, h->delivery);
  // Read again (`again`) as its next delivery once its release is
  // acknowledged (the release counts nothing against it): only another
  // member could take it from here, and none can while this one holds the
  // partition. Else left to the partition's next owner, which reads it
  // from the committed offset (nothing here commits past it).
  std::function<void(bool)> then;
  if (again) {
    KafkaMessage m = h->message;
    m.value = h->task.payload;
    then = [this, m = std::move(m), generation = h->generation](bool) mutable {
      auto pit = partitions_.find(m.partition);
      if (pit == partitions_.end() || pit->second.generation != generation) return;
      read_again_.push_back(std::move(m));
      tell_intake();
    };
  }
  if (h->started && !(h->last_end && h->last_end->delivery == h->delivery)) {
    write_entry(*h,
                attempt_end(h->message.partition, h->message.offset, release_of(*h, note)),
                std::move(then));
    then = nullptr;
  }
  release(task_id);
  if (then) then(true);
}

RecordedDelivery KafkaBackEnd::release_of(const Held& h, const std::string& note) const {
  const auto delivery = static_cast<std::uint32_t>(h.delivery);
  // A suspect's delivery that was released tells nothing of it: the next
  // one is a suspect's still (runs alone).
  if (h.history.last_lost) return recorded_suspect_release(delivery, settings_.worker.consumer.name, wall_ms(), note);
  return recorded_release(delivery, settings_.worker.consumer.name, wall_ms(), note);
}

void KafkaBackEnd::hold_back(std::int32_t partition) {
  auto it = partitions_.find(partition);
  if (it == partitions_.end()) return;
  Partition& part = it->second;
  if (!part.held_back && part.tracker.settled_beyond() >= settings_.max_uncommitted) {
    part.held_back = true;
    consumer_->pause(partition);
    out_.on_notice("partition " + std::to_string(partition) + " paused: " +
                   std::to_string(part.tracker.settled_beyond()) +
                   " settled records wait uncommitted behind one that waits for its retry (--max-uncommitted)");
  }
}

void KafkaBackEnd::lose(std::int64_t task_id, const std::string& why, LostAs as, bool stop_child) {
  Held* h = held(task_id);
  if (h == nullptr) return;
  if (h->ref != 0 || h->handed) {
    held_.answered(h->task.source_id, h->delivery);
    if (h->ref != 0) answers_.lost.push_back({h->ref, why, as, stop_child});
  } else {
    ++report_.taken_over;
    out_.on_verdict(h->task, Outcome{},
                    WorkerVerdict{WorkerVerdict::Type::kTakenOver, h->task.source_id, h->delivery, "",
                                  "not settled here: " + why});
  }
  release(task_id);
}

void KafkaBackEnd::release(std::int64_t task_id) { held_.release(task_id); }

void KafkaBackEnd::commit_settled(bool now) {
  if (closed_ || !consumer_) return;
  const auto t = Clock::now();
  if (!now && t - last_commit_ < settings_.commit_every) return;
  last_commit_ = t;
  std::map<std::int32_t, KafkaCommitted> offsets;
  for (auto& [p, part] : partitions_) {
    if (auto c = part.tracker.commit(part.attempts)) {
      offsets[p] = KafkaCommitted{c->offset, attempt_commit_metadata(c->log_from), true};
      part.attempts.forget_below(c->offset);
    }
    if (part.held_back && part.tracker.settled_beyond() < settings_.max_uncommitted / 2) {
      part.held_back = false;
      consumer_->resume(p);
    }
  }
  if (Status s = consumer_->commit(offsets, now); !s) out_.on_notice("warning: " + s.message());
}

// ---- lag ----

std::chrono::milliseconds KafkaBackEnd::lag_every() const {
  // Often enough to tell a commit held for --behind-after from one that moved.
  return std::clamp(settings_.behind_after / 4, std::chrono::milliseconds(25), std::chrono::milliseconds(1000));
}

std::optional<AttemptStore::Clock::time_point> KafkaBackEnd::due_by() const {
  if (partitions_.empty() || closed_) return std::nullopt;
  return last_lag_sample_ + lag_every();
}

std::string KafkaBackEnd::holding(const Held& h) const {
  const std::string record = "record " + h.id;
  if (h.settling) return record + " is being settled (its result or dead letter written)";
  if (h.started && h.last_end && h.last_end->delivery == h.delivery) {
    return record + " waits for its retry (delivery " + std::to_string(h.delivery) + " ended " +
           (h.last_end->kind.empty() ? std::string("unrun") : h.last_end->kind) + ")";
  }
  if (h.started) return record + " runs (delivery " + std::to_string(h.delivery) + ")";
  return record + " waits for a slot";
}

void KafkaBackEnd::sample_lag() {
  if (closed_ || !consumer_) return;
  const auto now = Clock::now();
  if (now - last_lag_sample_ < lag_every()) return;
  last_lag_sample_ = now;
  // Cheap: the watermarks are what librdkafka's fetcher last saw (a lookup
  // under its lock, no request; a paused partition's end is the one seen
  // before its pause).
  std::vector<KafkaPartitionLag> rows;
  std::map<std::int32_t, std::size_t> row_of;
  for (const auto& [p, part] : partitions_) {
    KafkaPartitionLag row;
    row.partition = p;
    row.committed = part.tracker.committable();
    if (const auto marks = consumer_->watermarks(p)) {
      row.end = marks->second;
      row.lag = kafka_lag(marks->second, row.committed, marks->first);
    }
    row.held = consumer_->buffered(p);
    row.settled_uncommitted = part.tracker.settled_beyond();
    row_of[p] = rows.size();
    rows.push_back(std::move(row));
  }
  for (const auto& [id, h] : held_.all()) {
    const auto it = row_of.find(h.message.partition);
    if (it == row_of.end() || partitions_.at(h.message.partition).generation != h.generation) continue;
    KafkaPartitionLag& row = rows[it->second];
    ++row.held;
    if (h.message.offset == row.committed) row.held_by = holding(h);
  }
  for (const KafkaMessage& m : read_again_) {
    const auto it = row_of.find(m.partition);
    if (it == row_of.end()) continue;
    KafkaPartitionLag& row = rows[it->second];
    ++row.held;
    if (m.offset == row.committed) row.held_by = "record " + source_of(m.partition, m.offset) + " is to be read again";
  }
  for (const std::string& line : lag_watch_.observe(rows, now)) out_.on_notice(line);
  if (settings_.on_lag) settings_.on_lag(rows);
}

}  // namespace pillbox::broker
