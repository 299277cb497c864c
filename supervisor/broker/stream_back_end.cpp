#include "supervisor/broker/stream_back_end.h"

#include <sys/eventfd.h>
#include <unistd.h>

#include <algorithm>
#include <utility>
#include <variant>

namespace pillbox::broker {
namespace {

std::chrono::milliseconds clamp(std::chrono::milliseconds v, std::chrono::milliseconds lo, std::chrono::milliseconds hi) {
  return std::max(lo, std::min(v, hi));
}

// The note of an attempt's end held for a suspected outage (not charged).
constexpr const char* kHeldNote = "held: handler outage suspected";

// A dead letter's settle: the id added to NAME:dlq, and whether the fleet
// had not seen its fingerprint before.
struct DeadLettered {
  std::string added;
  bool new_fingerprint = false;
};

// The fenced step that records a delivery in the entry's history: "", or
// the type its history key holds instead of a hash (nothing recorded).
auto recording(std::int64_t delivery, std::string json) {
  return [delivery, json = std::move(json)](auto& redis, const auto& keys, const auto& consumer,
                                            const auto& id) -> Expected<std::optional<std::string>> {
    auto r = record_delivery(redis, keys, consumer, id, delivery, json);
    if (!r) return Error{r.error()};
    return r->held ? std::optional<std::string>(r->history_type) : std::nullopt;
  };
}

}  // namespace

StreamBackEnd::StreamBackEnd(WorkerSettings settings, BrokerLink& reader, BrokerLink& writer, WorkerSink& out)
    : settings_(std::move(settings)),
      reader_(reader),
      writer_(writer),
      out_(out),
      intake_news_(::eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK)) {
  // Renewal runs on the writer's own thread: it must happen while every slot
  // is busy and the dispatcher has no reason to turn.
  auto claims = claims_;
  const StreamKeys keys = settings_.keys;
  const Consumer consumer = settings_.consumer;
  writer_.set_periodic(clamp(settings_.claim_idle / 3, std::chrono::milliseconds(50), std::chrono::milliseconds(10'000)),
                       [this, claims, keys, consumer](RedisConnection& redis) -> BrokerLink::Done {
                         std::vector<std::string> ids;
                         {
                           std::lock_guard lock(claims->mutex);
                           ids.assign(claims->held.begin(), claims->held.end());
                         }
                         if (ids.empty()) return {};
                         auto lost = renew(redis, keys, consumer, ids);
                         if (!lost || lost->empty()) return {};
                         std::vector<std::pair<std::string, std::string>> whys;
                         for (const auto& id : *lost) whys.emplace_back(id, why_not_held(redis, keys, consumer, id));
                         return [this, whys = std::move(whys)] {
                           for (const auto& [id, why] : whys) {
                             if (const Held* h = held_.by_source(id)) lose(h->task_id, why);
                           }
                         };
                       });
}

StreamBackEnd::~StreamBackEnd() = default;

std::int64_t StreamBackEnd::wall_ms() const {
  return std::chrono::duration_cast<std::chrono::milliseconds>(std::chrono::system_clock::now().time_since_epoch())
      .count();
}

AttemptStore::Capabilities StreamBackEnd::capabilities() const {
  Capabilities c;
  c.keeps_records = true;          // dead letters
  c.takes_back = false;            // a dead letter given stands (the fleet may have acted on it)
  c.can_stop = false;              // nothing would run what a worker holds: it gives it back
  c.merges_repeats = false;        // every entry is settled, twins too
  c.tells_ok_when_settled = true;  // an ok is told with its results entry
  return c;
}

void StreamBackEnd::drain() {
  reader_.drain();
  writer_.drain();
}

bool StreamBackEnd::quiet() const { return reader_.outstanding() == 0 && writer_.outstanding() == 0; }

std::vector<int> StreamBackEnd::wait_fds() const { return {reader_.wait_fd(), writer_.wait_fd()}; }

std::vector<int> StreamBackEnd::intake_fds() const {
  std::vector<int> fds = wait_fds();
  if (intake_news_.get() >= 0) fds.push_back(intake_news_.get());
  return fds;
}

void StreamBackEnd::tell_intake() {
  if (in_next_entry_ || intake_news_.get() < 0) return;
  const std::uint64_t one = 1;
  (void)!::write(intake_news_.get(), &one, sizeof one);
}

void StreamBackEnd::on_redis_state(bool up, const std::string& what) {
  if (!up) {
    ++redis_down_;
    // One outage, however many of the worker's connections found it, and
    // whenever they did: an idle link finds out only when it next has work.
    if (!outage_open_) {
      outage_open_ = true;
      outage_since_ = Clock::now();
      ++report_.redis_lost;
      out_.on_notice("lost Redis: " + what + "; reconnecting with backoff (tasks keep running)");
    }
    return;
  }
  if (redis_down_ > 0) --redis_down_;
  // A link is back: was it the same Redis? (The reader's next read may
  // already have found the group gone: its error waits for the answer.) The
  // question goes to the other link, so the outage ends once both answered.
  if (!check_restart()) end_outage();
}

void StreamBackEnd::end_outage() {
  if (!outage_open_ || redis_down_ > 0) return;
  outage_open_ = false;
  const auto ms = std::chrono::duration_cast<std::chrono::milliseconds>(Clock::now() - outage_since_).count();
  out_.on_notice("Redis is back after " + std::to_string(ms) + " ms");
}

bool StreamBackEnd::check_restart() {
  if (settings_.server_run_id.empty()) return false;
  if (restart_check_pending_) return true;
  restart_check_pending_ = true;
  std::vector<std::string> ids;
  for (const auto& [id, h] : held_.all()) ids.push_back(h.id);
  writer_.post([this, keys = settings_.keys, group = settings_.consumer.group,
                ids = std::move(ids)](RedisConnection& redis) -> BrokerLink::Done {
    auto state = server_state(redis, keys, group, ids);
    return [this, state = std::move(state), where = redis.address().describe()]() { on_server_state(state, where); };
  });
  return true;
}

void StreamBackEnd::end_restart_check() {
  restart_check_pending_ = false;
  for (const auto& e : std::exchange(deferred_errors_, {})) on_error(e);
}

void StreamBackEnd::on_server_state(const Expected<ServerState>& state, const std::string& where) {
  end_outage();
  if (!state) {
    deferred_errors_.push_back(state.error());
    return end_restart_check();
  }
  if (state->run_id == settings_.server_run_id) return end_restart_check();
  settings_.server_run_id = state->run_id;
  ++report_.redis_restarts;
  // Not in the stream, and still held here: lost. (One settled by a step
  // posted before the check was forgotten when its answer came, before this.)
  std::size_t held_gone = 0;
  for (const std::string& id : state->held_gone) held_gone += held_.knows(id);
  const RestartLosses losses = restart_losses(*state, results_written_, dead_letters_written_, held_gone);
  report_.results_lost += losses.results_lost;
  report_.dead_letters_lost += losses.dead_letters_lost;
  const std::string said = describe_restart(where, settings_.keys, settings_.consumer.group, losses);
  if (!losses.group_gone) {
    // The group is there: an error that came meanwhile is an error of its own.
    out_.on_notice(losses.any() ? "warning: " + said : said);
    return end_restart_check();
  }
  // The group is gone: the errors that came meanwhile (no such group) are
  // the restart's, said here; one that is not comes again at the next step.
  deferred_errors_.clear();
  if (!settings_.recreate_group) {
    on_error(said + ". Entries submitted before the restart are gone with it; to go on with what is submitted "
                    "from now on, start the workers with --recreate-group");
    return end_restart_check();
  }
  out_.on_notice("warning: " + said + "; the consumer group is made anew (--recreate-group): entries submitted "
                 "from now on are run");
  writer_.post([this, keys = settings_.keys, group = settings_.consumer.group](RedisConnection& redis) -> BrokerLink::Done {
    auto made = create_group(redis, keys, group);
    return [this, made = std::move(made)]() {
      if (!made) {
        deferred_errors_.push_back(made.message());
      } else {
        ++report_.groups_recreated;
        claim_cursor_ = "0-0";
      }
      end_restart_check();
    };
  });
}

void StreamBackEnd::on_error(const std::string& message) {
  if (restart_check_pending_) {
    deferred_errors_.push_back(message);
    return;
  }
  if (report_.error.empty()) report_.error = message;
  stop_reading("a Redis error: " + message);
}

void StreamBackEnd::check_signals() {
  if (const int sig = stop_signals_.caught(); sig != 0 && !stopping_) {
    report_.stop_signal = sig;
    stop_reading(stop_signal_name(sig));
  }
}

void StreamBackEnd::stop_reading(const std::string& why) {
  if (stopping_) return;
  stopping_ = true;
  stopping_why_ = why;
  out_.on_notice("stopping (" + why + "): what runs finishes, nothing new is read, entries not started are released");
  // Read and not yet the engine's: recorded as not run, so that the worker
  // that takes them over does not count a lost delivery.
  for (std::int64_t id : held_.take_queue()) release_unstarted(id);
}

void StreamBackEnd::release_unstarted(std::int64_t task_id) {
  Held* h = held(task_id);
  if (h == nullptr) return;
  ++report_.released;
  out_.on_verdict(h->task, Outcome{},
                  WorkerVerdict{WorkerVerdict::Type::kReleased, h->id, h->delivery, "", "the worker is stopping"});
  if (judgeable(h->delivery)) {
    record(*h, recorded_release(static_cast<std::uint32_t>(h->delivery), settings_.consumer.name, wall_ms(),
                                "released: the worker is stopping"));
  }
  release(task_id);
}

// ---- intake ----

TaskSource::Item StreamBackEnd::next_entry() {
  if (intake_news_.get() >= 0) {
    std::uint64_t told = 0;
    (void)!::read(intake_news_.get(), &told, sizeof told);
  }
  in_next_entry_ = true;
  drain();
  in_next_entry_ = false;
  check_signals();
  TaskSource::Item item;
  const auto now = Clock::now();
  // Idle is counted from the first chance to read, not from construction: a
  // slow start (the sandbox's checks, a sanitizer build) is not idleness
  // (broke under ASan: --exit-when-idle 1s exited before its first read).
  if (!intake_started_) {
    intake_started_ = true;
    last_activity_ = now;
  }
  // Idle is nothing held: entries that run, wait for a retry or are held by
  // an outage keep the worker busy (the engine dead-letters parked ones once
  // nothing else is in hand).
  if (!held_.empty()) last_activity_ = now;
  if (settings_.exit_when_idle && !stopping_ && held_.none_queued() && !read_outstanding_ && !claim_outstanding_ &&
      now - last_activity_ >= *settings_.exit_when_idle) {
    stop_reading("nothing new or claimable for " + std::to_string(settings_.exit_when_idle->count()) + " ms");
  }
  if (!held_.none_queued()) return held_.hand_first();
  if (stopping_) {
    item.type = read_outstanding_ || claim_outstanding_ ? TaskSource::Item::Type::kWait : TaskSource::Item::Type::kEnd;
    return item;
  }
  // A restarted Redis may have lost the group: nothing to read until the
  // check says.
  item.type = TaskSource::Item::Type::kWait;
  if (restart_check_pending_) return item;  // its answer wakes the dispatcher (wait_fds)
  read_more(now);
  // The next claim scan is due then. (Idleness is checked when a read
  // comes back: an empty read waits --read-block at most.)
  if (!claim_outstanding_ && !claims_paused_) item.wake_at = std::max(now, next_claim_at_);
  return item;
}

void StreamBackEnd::read_more(Clock::time_point now) {
  // One turn's worth read ahead (as many entries as there are slots). They
  // are delivered, hence counted, while they wait: a worker that dies holds
  // at most 2 x --jobs entries.
  const std::size_t want = std::max<std::size_t>(settings_.jobs, 1);
  if (!claim_outstanding_ && !claims_paused_ && now >= next_claim_at_) {
    claim_outstanding_ = true;
    next_claim_at_ = now + clamp(settings_.claim_idle / 4, std::chrono::milliseconds(100), std::chrono::milliseconds(5000));
    writer_.post([this, want, keys = settings_.keys, consumer = settings_.consumer, idle = settings_.claim_idle,
                  start = claim_cursor_](RedisConnection& redis) -> BrokerLink::Done {
      auto c = claim_idle(redis, keys, consumer, idle, start, want);
      return [this, c = std::move(c)]() mutable {
        claim_outstanding_ = false;
        tell_intake();
        if (!c) return on_error(c.error());
        claim_cursor_ = c->next_start;
        if (claim_cursor_ != "0-0") next_claim_at_ = Clock::now();  // more to scan
        for (auto& d : c->deliveries) admit(std::move(d), true);
      };
    });
  }
  if (!read_outstanding_) {
    read_outstanding_ = true;
    reader_.post([this, want, keys = settings_.keys, consumer = settings_.consumer,
                  block = settings_.read_block](RedisConnection& redis) -> BrokerLink::Done {
      auto r = read_new(redis, keys, consumer, want, block);
      return [this, r = std::move(r)]() mutable {
        read_outstanding_ = false;
        tell_intake();
        if (!r) return on_error(r.error());
        for (auto& d : *r) admit(std::move(d), false);
      };
    });
  }
}

void StreamBackEnd::admit(Delivery d, bool claimed) {
  if (Held* h = held_.by_source(d.entry)) return claimed_again(*h, d);
  ++report_.deliveries;
  if (claimed) ++report_.claimed;
  last_activity_ = Clock::now();
  Held& h = held_.hold();
  const std::int64_t id = h.task_id;
  read_entry(d, h);
  held_.name(h, h.id);
  {
    std::lock_guard lock(claims_->mutex);
    claims_->held.insert(h.id);
  }
  if (stopping_) return release_unstarted(id);  // read as the worker began to stop: not run here
  if (auto refused = check_entry(settings_, d, h)) return refuse(h, *refused);
  held_.queue(id);
}

void StreamBackEnd::claimed_again(Held& h, const Delivery& d) {
  // (Or someone made it look idle: XCLAIM ... IDLE.) Not a second copy: the
  // run here goes on at the new count.
  ++report_.claimed_again;
  const std::int64_t mine = h.delivery;
  h.delivery = d.count;
  // The delivery this worker holds it at is marked, so that it is not
  // counted as one that never reported back; deliveries in between (when
  // another worker had it) keep what they have. The running attempt's
  // outcome is recorded at the new count.
  if (!judgeable(mine)) return;
  if (h.history.recorded.empty() || h.history.recorded.back().delivery != mine) {
    const auto note = recorded_release(static_cast<std::uint32_t>(mine), settings_.consumer.name, wall_ms(),
                                       "claimed again by the worker that held it (its renewal came late)");
    writer_.post([this, keys = settings_.keys, consumer = settings_.consumer, id = h.id, mine,
                  json = delivery_json(note)](RedisConnection& redis) -> BrokerLink::Done {
      auto r = record_delivery(redis, keys, consumer, id, mine, json);
      return [this, r = std::move(r)]() {
        if (!r) on_error(r.error());
      };
    });
  }
  // An attempt running now ends at the new count (its end consumes it); one
  // waiting for its retry runs at the new count, without another delivery.
}

Expected<std::optional<store::LedgerTask>> StreamBackEnd::find(const Task& task, const std::string&) {
  return held_.ledger_task(task.source_id, "stream entry");
}

// ---- the engine's effects ----

void StreamBackEnd::add(LedgerWrite write) { writes_.push_back(std::move(write)); }

bool StreamBackEnd::has_unapplied() const {
  return !writes_.empty() || has_answers(answers_);
}

// (The reader's blocking read is always out while the worker reads; once
// it stops, what that read brings is released before the run ends.)
bool StreamBackEnd::idle() const {
  return !has_unapplied() && writer_.outstanding() == 0 && (!stopping_ || reader_.outstanding() == 0);
}

Expected<BatchResult> StreamBackEnd::apply(std::vector<StartAttempt> starts, bool, Commit, Clock::time_point) {
  drain();
  check_signals();
  std::vector<LedgerWrite> writes = std::exchange(writes_, {});
  // The tasks this turn settles (their ends go with the settle: it deletes
  // the history) and holds for an outage (their ends say so).
  std::set<std::int64_t> settling, held_for_outage;
  for (const LedgerWrite& w : writes) {
    if (const auto* q = std::get_if<QuarantinePayload>(&w)) settling.insert(q->task_id);
    if (const auto* k = std::get_if<KeepResult>(&w)) settling.insert(k->task_id);
    if (const auto* s = std::get_if<SetTaskWait>(&w); s && s->held) held_for_outage.insert(s->task_id);
    // Claims pause and resume in the order the engine wrote them.
    if (const auto* s = std::get_if<SetTaskWait>(&w); s && s->held) claims_paused_ = true;
    if (std::holds_alternative<ReleaseTask>(w) && !stopping_) claims_paused_ = true;
    if (std::holds_alternative<KeepResult>(w)) claims_paused_ = false;
  }
  for (LedgerWrite& w : writes) {
    if (const auto* end = std::get_if<EndAttempt>(&w)) {
      Held* h = held(end->task_id);
      if (h == nullptr) continue;
      const auto delivery = static_cast<std::uint32_t>(h->delivery);
      RecordedDelivery d;
      if (end->outcome.kind == "interrupted") {
        // Cut short by the worker's end: nothing of the payload is known.
        d = recorded_release(delivery, settings_.consumer.name, wall_ms(), "released: " + end->outcome.message);
      } else {
        const bool held_here = held_for_outage.count(end->task_id) > 0 && !end->charged && !end->transient;
        d = recorded_outcome(delivery, settings_.consumer.name, wall_ms(), end->outcome, end->charged, end->transient,
                             held_here ? kHeldNote : "");
      }
      h->last_end = d;
      h->ended_at[end->n] = delivery;
      h->started_at = h->delivery;  // its end is this delivery's: a retry is delivered again
      if (settling.count(end->task_id) == 0 && judgeable(h->delivery)) record(*h, d);
    } else if (const auto* u = std::get_if<UnchargeAttempt>(&w)) {
      // An earlier failure the outage explains: recorded again, uncharged.
      Held* h = held(u->task_id);
      if (h == nullptr) continue;
      const auto ended = h->ended_at.find(u->n);
      const std::uint32_t at = ended != h->ended_at.end() ? ended->second : u->n;
      for (RecordedDelivery& d : h->history.recorded) {
        if (d.delivery != at || !d.charged) continue;
        d.charged = false;
        d.note = kHeldNote;
        record(*h, d);
      }
    } else if (const auto* k = std::get_if<KeepResult>(&w)) {
      Held* h = held(k->task_id);
      if (h == nullptr) continue;
      Outcome outcome = h->last_end ? outcome_of(*h->last_end, Kind::kOk) : Outcome{};
      outcome.output = k->output;
      settle_ok(*h, outcome);
    } else if (const auto* q = std::get_if<QuarantinePayload>(&w)) {
      Held* h = held(q->task_id);
      if (h == nullptr) continue;
      dead_letter(*h, q->outcome, q->reason, /*unrun=*/false);
    } else if (const auto* s = std::get_if<SetTaskState>(&w)) {
      // Gave up here (not the payload's fault): its end is recorded, and it
      // is left for another worker. (An ok settles with its result.)
      if (s->state == store::TaskState::kGaveUp) release(s->task_id);
    } else if (const auto* r = std::get_if<ReleaseTask>(&w)) {
      // Held too long by an outage here, or waiting as the worker stops.
      give_back(r->task_id, stopping_ ? "released: the worker is stopping" : "released: outage here: left to other workers");
    } else if (std::holds_alternative<ReleaseClaims>(w)) {
      // The worker ends: every entry still held is left for the fleet.
      std::vector<std::int64_t> ids;
      for (const auto& [id, h] : held_.all()) ids.push_back(id);
      for (std::int64_t id : ids) give_back(id, "released: the worker is stopping");
    }
    // SetTaskWait: nothing to write; the claim stays renewed while the task
    // waits. TakeBackRecord: never (takes_back is false).
  }
  for (const StartAttempt& s : starts) start(s);
  return std::exchange(answers_, BatchResult{});
}

void StreamBackEnd::refuse(Held& h, const Refused& refused) {
  if (refused.protocol_error) ++report_.protocol_errors;
  dead_letter(h, refused.outcome, refused.reason, /*unrun=*/true);
}

template <typename Step, typename Then>
void StreamBackEnd::post_fenced(const Held& h, bool error_if_released, Step step, Then then) {
  writer_.post([this, task_id = h.task_id, error_if_released, keys = settings_.keys, consumer = settings_.consumer,
                id = h.id, step = std::move(step), then = std::move(then)](RedisConnection& redis) -> BrokerLink::Done {
    auto r = step(redis, keys, consumer, id);
    const std::string why = r && !*r ? why_not_held(redis, keys, consumer, id) : "";
    return [this, task_id, error_if_released, why, then, r = std::move(r)]() {
      if (!r && error_if_released) return left_pending(task_id, r.error());
      Held* h = held(task_id);
      if (h == nullptr) return;
      if (!r) return left_pending(task_id, r.error());
      if (!*r) return lose(task_id, why);
      then(*h, **r);
    };
  });
}

void StreamBackEnd::answer_start(const Held& h) {
  ++report_.attempts;
  answers_.started.push_back({h.ref, h.task_id, static_cast<std::uint32_t>(h.delivery), store::TaskState::kPending, ""});
}

void StreamBackEnd::start(const StartAttempt& s) {
  Held* h = held(s.task_id);
  if (h == nullptr) {
    // Lost after the engine took it, before its first start: why, once.
    auto gone = lost_before_start_.find(s.task_id);
    TaskLost lost{s.ref, "no longer held by this worker", LostAs::kTakenOver};
    if (gone != lost_before_start_.end()) {
      lost.why = gone->second.second.why;
      lost.as = gone->second.second.as;
      lost_before_start_.erase(gone);
    }
    answers_.lost.push_back(lost);
    return;
  }
  h->ref = s.ref;
  if (h->started_at != h->delivery && (!s.solo || h->start_recorded == h->delivery)) {
    // Its first attempt at this delivery: the count Redis gave it is its number.
    h->started_at = h->delivery;
    answer_start(*h);
    return;
  }
  if (h->started_at != h->delivery) {
    // A suspect's: its start is recorded before it runs (delivery_history.h).
    const auto d = recorded_start(static_cast<std::uint32_t>(h->delivery), settings_.consumer.name, wall_ms());
    auto then = [this, delivery = h->delivery](Held& h, const std::string& history_type) {
      if (!history_type.empty()) {
        return refuse(h, history_not_readable(settings_, h.id, history_type, "history not readable: not run again"));
      }
      // (Claimed again meanwhile: it runs at the new count.)
      h.start_recorded = delivery;
      h.started_at = h.delivery;
      answer_start(h);
    };
    post_fenced(*h, false, recording(h->delivery, delivery_json(d)), std::move(then));
    return;
  }
  // A retry: delivered again, so that the count rises before it runs.
  ++report_.retried;
  auto step = [](auto& redis, const auto& keys, const auto& consumer, const auto& id) {
    return redeliver(redis, keys, consumer, id);
  };
  post_fenced(*h, false, std::move(step), [this](Held& h, const Delivery& d) {
    if (auto refused = check_redelivery(settings_, d, h)) return refuse(h, *refused);
    if (auto refused = lost_too_often(settings_, h)) return refuse(h, *refused);
    h.started_at = h.delivery;
    answer_start(h);
  });
}

void StreamBackEnd::record(Held& h, const RecordedDelivery& d) {
  post_fenced(h, true, recording(d.delivery, delivery_json(d)), [this](Held& h, const std::string& history_type) {
    if (history_type.empty()) return;
    refuse(h, history_not_readable(settings_, h.id, history_type, "history not readable: not run again"));
  });
  // What this worker knows of the history from now on (a record at the
  // same delivery replaces the one before).
  auto& recorded = h.history.recorded;
  auto at = std::find_if(recorded.begin(), recorded.end(), [&](const RecordedDelivery& r) { return r.delivery == d.delivery; });
  if (at != recorded.end()) {
    *at = d;
  } else {
    recorded.push_back(d);
  }
}

void StreamBackEnd::settle_ok(Held& h, const Outcome& outcome) {
  auto step = [fields = result_fields(settings_, h, outcome),
               target = settings_.results ? settings_.keys.results : std::string(),
               maxlen = settings_.results_maxlen](auto& redis, const auto& keys, const auto& consumer, const auto& id) {
    return settle(redis, keys, consumer, id, target, maxlen, fields);
  };
  post_fenced(h, true, std::move(step), [this](Held& h, const std::string& added) {
    ++report_.ok;
    results_written_.add(added);
    held_.answered(h.id, h.delivery);
    answers_.settled.push_back({h.ref, added});
    release(h.task_id);
  });
}

void StreamBackEnd::dead_letter(Held& h, const Outcome& outcome, const std::string& reason, bool unrun) {
  auto step = [fields = dead_letter_fields(settings_, h, outcome, reason, wall_ms()),
               label = fingerprint_label(std::string(to_string(outcome.kind)), outcome.fingerprint)](
                  auto& redis, const auto& keys, const auto& consumer,
                  const auto& id) -> Expected<std::optional<DeadLettered>> {
    auto r = settle(redis, keys, consumer, id, keys.dlq, 0, fields);
    if (!r) return Error{r.error()};
    if (!*r) return std::optional<DeadLettered>();
    // Once it is in NAME:dlq: whether the fleet had seen the failure before.
    // Only a metric rides on it: when Redis cannot say, it is not new.
    auto added = note_dead_letter_fingerprint(redis, keys, label);
    return std::optional<DeadLettered>({std::move(**r), added && *added});
  };
  post_fenced(h, true, std::move(step), [this, outcome, reason, unrun](Held& h, const DeadLettered& r) {
    ++report_.dead_lettered;
    dead_letters_written_.add(r.added);
    if (unrun || h.ref == 0) {
      // The intake's own verdict: the engine never had it, or loses it now.
      out_.on_verdict(h.task, outcome, WorkerVerdict{WorkerVerdict::Type::kDeadLettered, h.id, h.delivery, r.added,
                                                     reason, r.new_fingerprint});
      if (h.ref != 0) answers_.lost.push_back({h.ref, "dead-lettered unrun: " + reason, LostAs::kDeadLettered});
    } else {
      held_.answered(h.id, h.delivery);
      QuarantineWritten q;
      q.ref = h.ref;
      q.new_fingerprint = r.new_fingerprint;
      q.settled_as = r.added;
      answers_.quarantined.push_back(std::move(q));
    }
    release(h.task_id);
  });
}

void StreamBackEnd::give_back(std::int64_t task_id, const std::string& note) {
  if (auto gone = lost_before_start_.find(task_id); gone != lost_before_start_.end()) {
    held_.unanswered(gone->second.first);  // lost already: nothing more to say of it
    lost_before_start_.erase(gone);
  }
  Held* h = held(task_id);
  if (h == nullptr) return;
  // Its delivery is recorded (as not run, unless its end is), so that the
  // worker that claims it next does not count one that never reported back.
  const bool recorded = !h->history.recorded.empty() && h->history.recorded.back().delivery == h->delivery;
  if (!recorded && judgeable(h->delivery)) {
    record(*h, recorded_release(static_cast<std::uint32_t>(h->delivery), settings_.consumer.name, wall_ms(), note));
  }
  release(task_id);
}

void StreamBackEnd::release(std::int64_t task_id) {
  const Held* h = held(task_id);
  if (h == nullptr) return;
  {
    std::lock_guard lock(claims_->mutex);
    claims_->held.erase(h->id);
  }
  held_.release(task_id);
}

void StreamBackEnd::left_pending(std::int64_t task_id, const std::string& error) {
  on_error(error);
  // It stays pending for the fleet; a delivery whose attempt ran is
  // recorded as released (the history is another key than the results or
  // dead letters whose step failed, mostly), so that the next worker does
  // not count it as one that never reported back.
  Held* h = held(task_id);
  if (h == nullptr) return;
  if (h->last_end && h->last_end->delivery == h->delivery && judgeable(h->delivery)) {
    RecordedDelivery d = *h->last_end;
    d.charged = false;
    d.note = "released: left pending after a Redis error";
    record(*h, d);
  }
  lose(task_id, "left pending after a Redis error", LostAs::kLeftPending);
}

void StreamBackEnd::lose(std::int64_t task_id, const std::string& why, LostAs as) {
  Held* h = held(task_id);
  if (h == nullptr) return;
  if (h->ref != 0) {
    held_.answered(h->id, h->delivery);
    answers_.lost.push_back({h->ref, why, as});
  } else if (h->handed) {
    // The engine has it and has not started it (a suspect waits its turn):
    // told at its start, or forgotten when it is given back.
    held_.answered(h->id, h->delivery);
    lost_before_start_[task_id] = {h->id, TaskLost{0, why, as}};
  } else {
    ++report_.taken_over;
    out_.on_verdict(h->task, Outcome{},
                    WorkerVerdict{WorkerVerdict::Type::kTakenOver, h->id, h->delivery, "", "not settled here: " + why});
  }
  release(task_id);
}

}  // namespace pillbox::broker
