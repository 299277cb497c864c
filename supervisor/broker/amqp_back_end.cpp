#include "supervisor/broker/amqp_back_end.h"

#include <sys/eventfd.h>
#include <unistd.h>

#include <algorithm>
#include <utility>
#include <variant>

#include "supervisor/broker/amqp_topology.h"
#include "supervisor/io/terminal_text.h"

namespace pillbox::broker {
namespace {

// Publishes `p` and waits for the broker's confirm.
Status send(AmqpConnection& c, const AmqpPublication& p) {
  AmqpOutgoing m = p.message;
  m.body = p.body;
  Status s = p.exchange.empty() ? c.publish(p.routing_key, m) : c.publish_to_exchange(p.exchange, m);
  if (!s) return s;
  return c.wait_confirmed();
}

// What a consume asks of the broker: RabbitMQ's prefetch is 16 bits, 0 unbounded.
std::uint16_t consume_prefetch(std::size_t n) {
  return static_cast<std::uint16_t>(std::clamp<std::size_t>(n, 1, 65535));
}

// `p` alone, moved (a braced list would copy it: a payload of up to
// --max-payload).
std::vector<AmqpPublication> only(AmqpPublication p) {
  std::vector<AmqpPublication> ps;
  ps.push_back(std::move(p));
  return ps;
}

}  // namespace

std::size_t default_amqp_prefetch(std::size_t jobs) {
  // --jobs: what a worker or the broker dying hands back is what the
  // worker held, and each that had run comes back as a duplicate (in
  // amqp_chaos_test 5 to 12 at 2, 14 to 18 at 8). A deeper prefetch is
  // faster (a slot waits one broker round trip less after each ack:
  // bench/README.md) and safe for good messages (a suspect runs alone),
  // for an operator to choose.
  return std::clamp<std::size_t>(jobs, 1, 65535);
}

AmqpBackEnd::AmqpBackEnd(AmqpWorkerSettings settings, AmqpLink& consumer, AmqpLink& publisher, WorkerSink& out)
    : settings_(std::move(settings)),
      consumer_(consumer),
      publisher_(publisher),
      out_(out),
      intake_news_(::eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK)) {
  wanted_prefetch_->store(consume_prefetch(settings_.prefetch));  // the consumer link's Setup consumed so
  // The consume loop: on the consumer link's thread whenever it has no
  // other work; each message comes here through drain().
  consumer_.set_idle([this, wait = settings_.consume_wait, wake = consumer_.wake_fd(),
                      wanted = wanted_prefetch_](AmqpConnection& c) -> AmqpLink::Done {
    // A connection without the consume the worker wants: whatever order the
    // pauses, resumes, reconnections and their answers came in (a pause
    // posted before a loss runs again on the next connection, and cancels
    // the consume its Setup made), the worker consumes again here rather
    // than wait, without a message, until --exit-when-idle ends it. A pause
    // wanted meanwhile is posted after `wanted` is cleared: it runs after
    // this and cancels what this consumed.
    if (!c.consuming() && wanted->load() != 0) return restore_consume(c);
    auto m = c.next(wait, wake);
    if (!m && c.broken()) return nullptr;  // the link says so, connects again and consumes anew (its Setup)
    if (!m) {
      // The broker ended the consume and kept the connection (NAME deleted
      // or moved): nothing more comes; the worker stops and says why.
      return [this, error = m.error()]() { on_error(error); };
    }
    if (!*m) return nullptr;
    return [this, m = std::move(**m), id = c.id()]() mutable { admit(std::move(m), id); };
  });
}

AmqpBackEnd::~AmqpBackEnd() = default;

AmqpLink::Done AmqpBackEnd::restore_consume(AmqpConnection& c) {
  // On the link's thread: only what is fixed since the start (the queue's
  // name) and the connection are read here.
  const std::string& queue = settings_.worker.keys.stream;
  const Status consumed = c.consume(queue, wanted_prefetch_->load());
  // Broken: the link connects again, and its Setup consumes.
  if (consumed || c.broken()) return nullptr;
  return [this, error = consumed.message()]() {
    on_error(error + "; the worker cannot take messages from '" + settings_.worker.keys.stream +
             "' (check that it exists and that this user may consume it)");
  };
}

std::int64_t AmqpBackEnd::wall_ms() const {
  return std::chrono::duration_cast<std::chrono::milliseconds>(std::chrono::system_clock::now().time_since_epoch())
      .count();
}

AttemptStore::Capabilities AmqpBackEnd::capabilities() const {
  Capabilities c;
  c.keeps_records = true;          // dead letters
  c.takes_back = false;            // a dead letter given stands
  c.can_stop = false;              // nothing would run what a worker holds: it gives it back
  c.merges_repeats = false;        // every message is settled, twins too
  c.tells_ok_when_settled = true;  // an ok is told once its result is confirmed and its message acknowledged
  return c;
}

void AmqpBackEnd::drain() {
  consumer_.drain();
  publisher_.drain();
}

bool AmqpBackEnd::quiet() const { return consumer_.outstanding() == 0 && publisher_.outstanding() == 0; }

std::vector<int> AmqpBackEnd::wait_fds() const { return {consumer_.wait_fd(), publisher_.wait_fd()}; }

std::vector<int> AmqpBackEnd::intake_fds() const {
  std::vector<int> fds = wait_fds();
  if (intake_news_.get() >= 0) fds.push_back(intake_news_.get());
  return fds;
}

void AmqpBackEnd::tell_intake() {
  if (in_next_ || intake_news_.get() < 0) return;
  const std::uint64_t one = 1;
  (void)!::write(intake_news_.get(), &one, sizeof one);
}

void AmqpBackEnd::check_signals() {
  if (const int sig = stop_signals_.caught(); sig != 0 && !stopping_) {
    report_.stop_signal = sig;
    stop_reading(stop_signal_name(sig));
  }
}

void AmqpBackEnd::on_error(const std::string& message) {
  if (report_.error.empty()) report_.error = message;
  stop_reading("a RabbitMQ error: " + message);
}

void AmqpBackEnd::on_link_state(bool consumer, bool up, const std::string& what) {
  if (!up) {
    if (links_down_++ == 0) {
      ++report_.redis_lost;
      out_.on_notice("lost RabbitMQ: " + what + "; reconnecting with backoff (tasks keep running)");
    }
    if (consumer) {
      prefetch_asked_ = 0;  // the next connection's Setup consumes, asking --prefetch
      consume_paused_ = false;
      if (!stopping_) wanted_prefetch_->store(consume_prefetch(settings_.prefetch));
      // The broker put back every message this connection held: each is
      // delivered again (counted), to this worker or another. What runs here
      // runs on, unsettled.
      std::vector<std::int64_t> ids;
      for (const auto& [id, h] : held_.all()) ids.push_back(id);
      for (std::int64_t id : ids) lose(id, "the connection to RabbitMQ was lost: the broker delivers it again");
    }
    return;
  }
  if (links_down_ > 0 && --links_down_ == 0) out_.on_notice("RabbitMQ is back: " + what);
  // A new consuming connection consumes again (the link's Setup): a
  // worker that stops cancels that consume too.
  if (consumer && stopping_) cancel_consume();
}

void AmqpBackEnd::stop_reading(const std::string& why) {
  if (stopping_) return;
  stopping_ = true;
  stopping_why_ = why;
  out_.on_notice("stopping (" + why + "): what runs finishes, nothing new is taken, messages not started are given back");
  wanted_prefetch_->store(0);
  consumer_.set_idle(nullptr);
  cancel_consume();
  for (std::int64_t id : held_.take_queue()) give_back(id, "released: the worker is stopping");
}

void AmqpBackEnd::cancel_consume() {
  cancel_answered_ = false;
  consumer_.post([this](AmqpConnection& c) -> AmqpLink::Done {
    auto rest = c.cancel_consume();
    return [this, rest = std::move(rest), id = c.id()]() mutable {
      cancel_answered_ = true;
      tell_intake();
      if (!rest) return;  // the connection is gone: the broker took back what it held
      // Delivered before the broker read the cancel: given back (admit
      // gives back all it gets while the worker stops).
      for (AmqpMessage& m : *rest) admit(std::move(m), id);
    };
  });
}

// ---- intake ----

void AmqpBackEnd::admit(AmqpMessage m, std::uint64_t connection) {
  ++report_.deliveries;
  last_activity_ = Clock::now();
  tell_intake();
  Held& h = held_.hold();
  const std::int64_t id = h.task_id;
  h.connection = connection;
  read_message(std::move(m), h);
  // Two messages may share a message_id (a publisher's choice): the second
  // is told apart by its delivery tag.
  std::string source = h.id;
  if (held_.knows(source)) source += " #" + std::to_string(h.message.delivery_tag);
  held_.name(h, std::move(source));
  if (stopping_) return give_back(id, "released: the worker is stopping");
  if (auto refused = check_message(settings_.worker, h)) {
    if (refused->protocol_error) ++report_.protocol_errors;
    return dead_letter(h, refused->outcome, refused->reason, /*unrun=*/true);
  }
  if (const auto names = stream_breaking_headers(h.message); !names.empty()) {
    // Before it can run (and perhaps kill workers until the broker
    // dead-letters it as it is): a copy NAME.dlq can keep. Not run here.
    std::string list;
    for (const std::string& n : names) list += (list.empty() ? "" : ", ") + table_cell(n, 64);  // a claim
    return give_back(id, "released: sent on with its decimal header" + std::string(names.size() > 1 ? "s " : " ") +
                             list + " as text (a dead letter with one breaks the stream queue " +
                             settings_.worker.keys.stream + ".dlq)");
  }
  if (alone_ != 0) {
    // Delivered before the broker read the pause (run_alone): not held
    // beside the suspect.
    return give_back(id, "released: a suspect runs alone on this worker; left to the others");
  }
  held_.queue(id);
  if (h.history.last_lost) run_alone(id);
}

std::size_t AmqpBackEnd::settles_under_way() const {
  std::size_t n = 0;
  for (const auto& [id, h] : held_.all()) n += h.settling;
  return n;
}

bool AmqpBackEnd::alone_now() const {
  if (consume_paused_ && !pause_answered_) return false;
  for (const auto& [id, h] : held_.all()) {
    if (id != alone_ && !h.handed) return false;
  }
  return true;
}

void AmqpBackEnd::run_alone(std::int64_t task_id) {
  alone_ = task_id;
  // What is held unstarted would die with this worker if the suspect
  // killed it, and be counted: given back (a suspect's release keeps it a
  // suspect). Running the fresh ones first instead kept more held when a
  // worker died: more duplicates in amqp_chaos_test (18 to 23 in four
  // runs, against 12 to 13 in three).
  std::vector<std::int64_t> others;
  for (std::int64_t id : held_.take_queue()) {
    if (id == task_id) held_.queue(id);
    else others.push_back(id);
  }
  for (std::int64_t id : others) give_back(id, "released: a suspect runs alone on this worker; left to the others");
  sync_consume();
}

TaskSource::Item AmqpBackEnd::next_message() {
  if (intake_news_.get() >= 0) {
    std::uint64_t told = 0;
    (void)!::read(intake_news_.get(), &told, sizeof told);
  }
  in_next_ = true;
  drain();
  in_next_ = false;
  check_signals();
  TaskSource::Item item;
  const auto now = Clock::now();
  if (!intake_started_) {
    intake_started_ = true;
    last_activity_ = now;
  }
  if (!held_.empty()) last_activity_ = now;
  if (settings_.worker.exit_when_idle && !stopping_ && held_.none_queued() &&
      now - last_activity_ >= *settings_.worker.exit_when_idle) {
    stop_reading("nothing new for " + std::to_string(settings_.worker.exit_when_idle->count()) + " ms");
  }
  if (!held_.none_queued() && settles_under_way() >= settings_.worker.jobs) {
    // A worker killed cuts every settle under way, and each comes back and
    // runs again (a duplicate result, a copy beside its original): no more
    // of them than --jobs, however deep the prefetch. (Their publishes go
    // one at a time on one link: more would wait there, not go faster.)
    item.type = TaskSource::Item::Type::kWait;
    return item;
  }
  if (!held_.none_queued() && held_.first_queued() == alone_ && !alone_now()) {
    // The suspect waits until nothing else is held unstarted (what was
    // given back acknowledged) and the consume is paused: were the worker
    // to die with it before, the others would be delivered again (counted),
    // and a copy already confirmed would run twice.
    item.type = TaskSource::Item::Type::kWait;
    return item;
  }
  if (!held_.none_queued()) return held_.hand_first();
  if (stopping_) {
    item.type = cancel_answered_ ? TaskSource::Item::Type::kEnd : TaskSource::Item::Type::kWait;
    return item;
  }
  item.type = TaskSource::Item::Type::kWait;
  // Idleness is looked at again by then.
  if (settings_.worker.exit_when_idle) item.wake_at = last_activity_ + *settings_.worker.exit_when_idle;
  return item;
}

Expected<std::optional<store::LedgerTask>> AmqpBackEnd::find(const Task& task, const std::string&) {
  return held_.ledger_task(task.source_id, "message");
}

// ---- the engine's effects ----

bool AmqpBackEnd::has_unapplied() const {
  return !writes_.empty() || has_answers(answers_);
}

bool AmqpBackEnd::idle() const {
  return !has_unapplied() && publisher_.outstanding() == 0 && consumer_.outstanding() == 0;
}

Expected<BatchResult> AmqpBackEnd::apply(std::vector<StartAttempt> starts, bool, Commit, Clock::time_point) {
  drain();
  check_signals();
  std::vector<LedgerWrite> writes = std::exchange(writes_, {});
  for (LedgerWrite& w : writes) {
    if (const auto* end = std::get_if<EndAttempt>(&w)) {
      Held* h = held(end->task_id);
      if (h == nullptr) continue;
      // The suspect ran and this worker lives: suspected no more. Consumed
      // again now, not once it is settled: one held for a handler outage
      // stays unsettled, and the breaker probes with fresh payloads.
      if (end->task_id == alone_) alone_ = 0;
      const auto delivery = static_cast<std::uint32_t>(h->delivery);
      h->last_end = end->outcome.kind == "interrupted"
                        ? recorded_release(delivery, settings_.worker.consumer.name, wall_ms(),
                                           "released: " + end->outcome.message)
                        : recorded_outcome(delivery, settings_.worker.consumer.name, wall_ms(), end->outcome,
                                           end->charged, end->transient);
    } else if (const auto* u = std::get_if<UnchargeAttempt>(&w)) {
      // An earlier failure the outage explains: its copy carries it uncharged.
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
      // A retry waits in a delay queue, not here; one held for an outage
      // stays held (unacknowledged) until the engine releases it.
      if (s->held) {
        if (Held* h = held(s->task_id)) h->outage_held = true;
      } else if (s->next_retry_at_ms > 0) {
        retry_later(s->task_id, std::chrono::milliseconds(std::max<std::int64_t>(s->next_retry_at_ms - wall_ms(), 1)));
      }
    } else if (const auto* k = std::get_if<KeepResult>(&w)) {
      Held* h = held(k->task_id);
      if (h == nullptr) continue;
      Outcome outcome = h->last_end ? outcome_of(*h->last_end) : Outcome{};
      outcome.kind = Kind::kOk;
      outcome.output = k->output;
      const std::string results = settings_.worker.results ? settings_.worker.keys.results : "";
      // A replayed message's notice first: a result that is not delivered
      // (its reply_to gone) is settled all the same, and must not leave the
      // replay without word of it.
      std::vector<AmqpPublication> ps;
      if (auto notice = replay_notice_publication(settings_.worker, *h, outcome)) ps.push_back(std::move(*notice));
      if (auto result = result_publication(settings_.worker, *h, outcome, results)) ps.push_back(std::move(*result));
      settle(*h, std::move(ps), Settled::kOk);
    } else if (const auto* q = std::get_if<QuarantinePayload>(&w)) {
      Held* h = held(q->task_id);
      if (h == nullptr) continue;
      dead_letter(*h, q->outcome, q->reason, /*unrun=*/false);
    } else if (const auto* s = std::get_if<SetTaskState>(&w)) {
      // Gave up here (not the payload's fault): left for another worker.
      if (s->state == store::TaskState::kGaveUp) give_back(s->task_id, "released: gave up here");
    } else if (const auto* r = std::get_if<ReleaseTask>(&w)) {
      give_back(r->task_id, stopping_ ? "released: the worker is stopping" : "released: outage here: left to other workers");
    } else if (std::holds_alternative<ReleaseClaims>(w)) {
      std::vector<std::int64_t> ids;
      for (const auto& [id, h] : held_.all()) ids.push_back(id);
      for (std::int64_t id : ids) give_back(id, "released: the worker is stopping");
    }
    // TakeBackRecord: never (takes_back is false).
  }
  for (const StartAttempt& s : starts) start(s);
  sync_consume();
  return std::exchange(answers_, BatchResult{});
}

void AmqpBackEnd::start(const StartAttempt& s) {
  Held* h = held(s.task_id);
  if (h == nullptr) {
    answers_.lost.push_back({s.ref, "no longer held by this worker", LostAs::kTakenOver});
    return;
  }
  if (h->settling) {
    // On its way to a delay queue (its wait ended before the broker
    // confirmed the copy): not run here, told now, once.
    held_.answered(h->task.source_id, h->delivery);
    answers_.lost.push_back({s.ref, h->settle_detail, LostAs::kHandedBack});
    h->ref = 0;
    return;
  }
  h->ref = s.ref;
  h->outage_held = false;
  ++report_.attempts;
  answers_.started.push_back({h->ref, h->task_id, static_cast<std::uint32_t>(h->delivery), store::TaskState::kPending, ""});
}

void AmqpBackEnd::settle(Held& h, std::vector<AmqpPublication> ps, Settled how, const std::string& detail,
                         std::chrono::milliseconds delay_bucket) {
  h.settling = true;
  h.settle_detail = detail;
  const std::int64_t task_id = h.task_id;
  // Where the verdict says it went: the publication it is settled as (a
  // notice comes with it, never in its place).
  std::string told;
  for (const AmqpPublication& p : ps) {
    if (!p.notice) told = p.exchange.empty() ? p.routing_key : p.exchange;
  }
  if (ps.empty()) return acknowledge(task_id, how, "", detail);
  publisher_.post([this, task_id, how, detail, told, delay_bucket, declared = declared_delays_, queue = settings_.worker.keys.stream,
                   ps = std::move(ps)](AmqpConnection& c) -> AmqpLink::Done {
    Status s = Status::ok();
    if (delay_bucket.count() > 0 && declared->count(delay_bucket.count()) == 0) {
      // Declared when first used (amqp_topology.h): idempotent, so another
      // worker's declaring it too is fine.
      auto made = declare_delay_queue(c, queue, delay_bucket);
      if (made) declared->insert(delay_bucket.count());
      if (!made) s = Status::error(made.error());
    }
    // In order, each confirmed before the next: one refused stops the
    // rest (a notice before its result: never a result without it).
    std::string target = told;
    bool notice = false;
    for (const AmqpPublication& p : ps) {
      if (!s) break;
      target = p.exchange.empty() ? p.routing_key : p.exchange;
      notice = p.notice;
      s = send(c, p);
    }
    return [this, task_id, how, detail, told, target, notice, queue, s]() {
      if (s) return acknowledge(task_id, how, told, detail);
      Held* h = held(task_id);
      if (h == nullptr) return;
      if (notice) {
        // Never acknowledged without it: the replay would learn nothing
        // of how its message ended. Left unacknowledged, as below.
        on_error("cannot publish the replay notice of message " + h->task.source_id + " to '" + target +
                 "': " + s.message() + "; the message is left unacknowledged");
        return lose(task_id, "left unacknowledged after a RabbitMQ error", LostAs::kLeftPending);
      }
      if (how == Settled::kOk && (target != settings_.worker.keys.results || s.code() == ErrorCode::kUsage)) {
        // Its requester went away (an RPC's reply queue is gone), or the
        // result can never be sent: the task is done all the same, and
        // says so. (A result NAME.results refuses is not dropped: below,
        // the worker stops, the message goes back to the queue.)
        out_.on_notice("warning: the result of " + h->task.key + " (message " + h->task.source_id +
                       ") was not delivered to '" + target + "': " + s.message());
        return acknowledge(task_id, how, "", detail);
      }
      if (s.code() == ErrorCode::kUsage) {
        // It can never be sent (headers over one frame: a key near a
        // frame's size). Left unacknowledged it would stop worker after
        // worker: rejected, the broker dead-letters the message itself,
        // whole, to NAME.dlx (reason rejected), and the queue goes on.
        return acknowledge(task_id, how == Settled::kDeadLetter ? how : Settled::kRefused,
                           amqp_queue_names(queue).dlx + " (rejected: RabbitMQ dead-letters it whole)",
                           detail + "; what pillbox would publish for it cannot be sent (" + s.message() + ")",
                           /*reject=*/true);
      }
      // Left unacknowledged: the broker delivers it again once this worker
      // is gone. The worker stops: it cannot settle what it runs.
      on_error("cannot publish to '" + target + "': " + s.message());
      lose(task_id, "left unacknowledged after a RabbitMQ error", LostAs::kLeftPending);
    };
  });
}

void AmqpBackEnd::acknowledge(std::int64_t task_id, Settled how, const std::string& added, const std::string& detail,
                              bool reject) {
  Held* h = held(task_id);
  if (h == nullptr) return;
  consumer_.post([this, task_id, how, added, detail, reject, tag = h->message.delivery_tag,
                  connection = h->connection](AmqpConnection& c) -> AmqpLink::Done {
    // A tag of an earlier connection: that message is the broker's again.
    const bool acked = c.id() == connection && (reject ? c.reject(tag, /*requeue=*/false) : c.ack(tag)).is_ok();
    return [this, task_id, how, added, detail, acked]() {
      tell_intake();
      Held* h = held(task_id);
      if (h == nullptr) return;
      if (!acked) return lose(task_id, "the connection to RabbitMQ was lost before it was acknowledged: delivered again");
      held_.answered(h->task.source_id, h->delivery);
      switch (how) {
        case Settled::kOk:
        case Settled::kDeadLetter:
        case Settled::kRefused:
          tell_settled(*h, how == Settled::kOk, how == Settled::kRefused, added, detail, answers_, report_, out_);
          break;
        case Settled::kRetry:
          ++report_.retried;
          if (h->ref != 0) answers_.lost.push_back({h->ref, detail, LostAs::kHandedBack});
          break;
        case Settled::kGiveBack:
          // Given back before the engine had it: said here (the engine
          // tells those it had).
          if (!h->handed) {
            ++report_.released;
            out_.on_verdict(h->task, Outcome{},
                            WorkerVerdict{WorkerVerdict::Type::kReleased, h->task.source_id, h->delivery, "", detail});
          }
          break;
      }
      release(task_id);
    };
  });
}

void AmqpBackEnd::dead_letter(Held& h, const Outcome& outcome, const std::string& reason, bool unrun) {
  h.verdict_outcome = outcome;
  settle(h, only(dead_letter_publication(settings_.worker, h, outcome, reason, wall_ms())),
         unrun ? Settled::kRefused : Settled::kDeadLetter, reason);
}

RecordedDelivery AmqpBackEnd::ended_or_released(const Held& h, const std::string& note) const {
  if (h.last_end && h.last_end->delivery == h.delivery) return *h.last_end;
  const auto delivery = static_cast<std::uint32_t>(h.delivery);
  // A suspect's delivery that did not run tells nothing of it: its copy's
  // next delivery is a suspect's still (runs alone).
  if (h.history.last_lost) return recorded_suspect_release(delivery, settings_.worker.consumer.name, wall_ms(), note);
  return recorded_release(delivery, settings_.worker.consumer.name, wall_ms(), note);
}

void AmqpBackEnd::give_back(std::int64_t task_id, const std::string& note) {
  Held* h = held(task_id);
  if (h == nullptr || h->settling) return;
  held_.unqueue(task_id);
  // Its delivery is recorded (its end, or as not run), so that the worker
  // that takes the copy does not count one that never reported back.
  settle(*h, only(carried_copy(*h, ended_or_released(*h, note), settings_.worker.keys.stream)), Settled::kGiveBack, note);
}

void AmqpBackEnd::retry_later(std::int64_t task_id, std::chrono::milliseconds wait) {
  Held* h = held(task_id);
  if (h == nullptr || h->settling) return;
  const auto bucket = delay_bucket(wait);
  const std::string queue = delay_queue_name(settings_.worker.keys.stream, bucket);
  settle(*h, only(carried_copy(*h, ended_or_released(*h, "released: waits for its retry"), queue)), Settled::kRetry,
         "retry in " + std::to_string(wait.count()) + " ms: waits in " + queue, bucket);
}

void AmqpBackEnd::sync_consume() {
  if (stopping_) return;  // the consume is cancelled or about to be
  const std::string queue = settings_.worker.keys.stream;
  if (alone_ != 0) {
    if (consume_paused_) return;
    consume_paused_ = true;
    pause_answered_ = false;
    const std::uint64_t pause = ++pauses_posted_;
    wanted_prefetch_->store(0);  // before the post: see the consume loop
    // Cancelling keeps what is unacknowledged on the channel; what came
    // before the cancel was read is admitted, and so given back. Lost
    // before it ran, it runs again on the next connection and cancels the
    // consume that connection's Setup made, the suspect gone with the old
    // one: the consume loop consumes again there (restore_consume).
    consumer_.post([this, pause](AmqpConnection& c) -> AmqpLink::Done {
      auto rest = c.cancel_consume();
      if (!rest) return nullptr;  // a broken connection: the broker took back what it held
      return [this, pause, rest = std::move(*rest), id = c.id()]() mutable {
        if (pause == pauses_posted_) pause_answered_ = true;  // else a later pause's answer is awaited
        tell_intake();
        for (AmqpMessage& m : rest) admit(std::move(m), id);
      };
    });
    return;
  }
  std::size_t outage_held = 0;
  for (const auto& [id, h] : held_.all()) outage_held += h.outage_held && !h.settling;
  const std::size_t prefetch = consume_prefetch(settings_.prefetch);
  const std::size_t want = consume_prefetch(prefetch + outage_held);
  if (!consume_paused_ && want == (prefetch_asked_ == 0 ? prefetch : prefetch_asked_)) return;
  consume_paused_ = false;
  prefetch_asked_ = want;
  wanted_prefetch_->store(consume_prefetch(want));
  // RabbitMQ applies a consumer's prefetch when it consumes (basic.qos
  // without `global`, the only kind a quorum queue takes): consumed again.
  consumer_.post([this, want, queue](AmqpConnection& c) -> AmqpLink::Done {
    auto rest = c.cancel_consume();  // none after a pause: nothing to cancel
    // A broken connection: the link connects again, and its Setup
    // consumes with --prefetch (on_link_state).
    if (!rest) return nullptr;
    // Refused, the connection kept: the consume loop tries again and says
    // why (restore_consume).
    (void)c.consume(queue, static_cast<std::uint16_t>(want));
    return [this, rest = std::move(*rest), id = c.id()]() mutable {
      for (AmqpMessage& m : rest) admit(std::move(m), id);
    };
  });
}

void AmqpBackEnd::release(std::int64_t task_id) {
  held_.release(task_id);
  if (task_id == alone_) {
    alone_ = 0;
    sync_consume();  // consumes again
  }
}

void AmqpBackEnd::lose(std::int64_t task_id, const std::string& why, LostAs as) {
  Held* h = held(task_id);
  if (h == nullptr) return;
  if (h->ref != 0 || h->handed) {
    held_.answered(h->task.source_id, h->delivery);
    if (h->ref != 0) answers_.lost.push_back({h->ref, why, as});
    // A task the engine has and has not started hears it at its start.
  } else {
    ++report_.taken_over;
    out_.on_verdict(h->task, Outcome{},
                    WorkerVerdict{WorkerVerdict::Type::kTakenOver, h->task.source_id, h->delivery, "",
                                  "not settled here: " + why});
  }
  release(task_id);
}

}  // namespace pillbox::broker
