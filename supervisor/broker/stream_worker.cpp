#include "supervisor/broker/stream_worker.h"

#include <signal.h>

#include <algorithm>

#include "shared/sha256.h"
#include "supervisor/exec/host_view.h"

namespace pillbox::broker {
namespace {

constexpr std::size_t kMaxKnownGood = 64 * 1024;  // larger payloads are not kept as probes

std::chrono::milliseconds clamp(std::chrono::milliseconds v, std::chrono::milliseconds lo, std::chrono::milliseconds hi) {
  return std::max(lo, std::min(v, hi));
}

}  // namespace

StreamWorker::StreamWorker(WorkerSettings settings, BrokerLink& reader, BrokerLink& writer, WorkerSink& out)
    : settings_(std::move(settings)),
      reader_(reader),
      writer_(writer),
      out_(out),
      breaker_(settings_.breaker),
      rng_(settings_.seed ? *settings_.seed : std::random_device{}()),
      last_activity_(Clock::now()) {
  // Renewal runs on the writer's own thread: it must happen while every slot
  // is busy and the dispatcher has no reason to turn.
  auto claims = claims_;
  const StreamKeys keys = settings_.keys;
  const Consumer consumer = settings_.consumer;
  writer_.set_periodic(clamp(settings_.claim_idle / 3, std::chrono::milliseconds(50), std::chrono::milliseconds(10'000)),
                       [this, claims, keys, consumer](RedisConnection& redis) -> BrokerLink::Done {
                         std::vector<std::string> held;
                         {
                           std::lock_guard lock(claims->mutex);
                           held.assign(claims->held.begin(), claims->held.end());
                         }
                         if (held.empty()) return {};
                         auto lost = renew(redis, keys, consumer, held);
                         if (!lost || lost->empty()) return {};
                         std::vector<std::pair<std::string, std::string>> whys;
                         for (const auto& id : *lost) {
                           whys.emplace_back(id, why_not_held(redis, keys, consumer, id));
                         }
                         return [this, whys = std::move(whys)] {
                           for (const auto& [id, why] : whys) {
                             for (auto& [ref, e] : entries_) {
                               // A running entry finds out when it settles; one
                               // that waits is forgotten now.
                               if (e.id == id && e.where != Where::kRunning && e.where != Where::kBusy) {
                                 taken_over(ref, why);
                                 break;
                               }
                             }
                           }
                         };
                       });
}

StreamWorker::~StreamWorker() = default;

std::int64_t StreamWorker::wall_ms() const {
  return std::chrono::duration_cast<std::chrono::milliseconds>(std::chrono::system_clock::now().time_since_epoch())
      .count();
}

void StreamWorker::on_redis_state(bool up, const std::string& what) {
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

void StreamWorker::end_outage() {
  if (!outage_open_ || redis_down_ > 0) return;
  outage_open_ = false;
  const auto ms = std::chrono::duration_cast<std::chrono::milliseconds>(Clock::now() - outage_since_).count();
  out_.on_notice("Redis is back after " + std::to_string(ms) + " ms");
}

bool StreamWorker::check_restart() {
  if (settings_.server_run_id.empty()) return false;
  if (restart_check_pending_) return true;
  restart_check_pending_ = true;
  std::vector<std::string> held;
  for (const auto& [ref, e] : entries_) held.push_back(e.id);
  writer_.post([this, keys = settings_.keys, group = settings_.consumer.group,
                held = std::move(held)](RedisConnection& redis) -> BrokerLink::Done {
    auto state = server_state(redis, keys, group, held);
    return [this, state = std::move(state), where = redis.address().describe()]() { on_server_state(state, where); };
  });
  return true;
}

void StreamWorker::end_restart_check() {
  restart_check_pending_ = false;
  std::vector<std::string> errors;
  errors.swap(deferred_errors_);
  for (const auto& e : errors) on_error(e);
}

void StreamWorker::on_server_state(const Expected<ServerState>& state, const std::string& where) {
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
  for (const std::string& id : state->held_gone) {
    held_gone += std::any_of(entries_.begin(), entries_.end(), [&](const auto& e) { return e.second.id == id; });
  }
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

void StreamWorker::on_error(const std::string& message) {
  if (restart_check_pending_) {
    deferred_errors_.push_back(message);
    return;
  }
  if (report_.error.empty()) report_.error = message;
  start_stopping("a Redis error: " + message);
}

void StreamWorker::on_entry_error(std::uint64_t ref, const std::string& message) {
  on_error(message);
  // The step on this entry failed on the server: the entry is left pending
  // there (the fleet takes it over after --claim-idle) and forgotten here.
  // Kept, it would wait for an answer that never comes (where == kBusy),
  // and the stopping worker would never see entries_ empty and end.
  auto it = entries_.find(ref);
  if (it == entries_.end()) return;
  if (!it->second.released) {
    ++report_.released;
    WorkerVerdict v{WorkerVerdict::Type::kReleased, it->second.id, it->second.delivery, "",
                    "left pending after a Redis error"};
    out_.on_verdict(it->second.task, Outcome{}, v);
  }
  forget(ref);
}

void StreamWorker::start_stopping(const std::string& why) {
  if (stopping_) return;
  stopping_ = true;
  out_.on_notice("stopping (" + why + "): " + std::to_string(in_flight_) +
                 " in flight finish, nothing new is read, entries not started are released");
  // Entries waiting here are released now: recorded as not run, so that the
  // worker that takes them over does not count a lost delivery.
  std::vector<std::uint64_t> waiting;
  for (auto& [ref, e] : entries_) {
    if (e.where == Where::kReady || e.where == Where::kDelayed || e.where == Where::kOutageHeld ||
        e.where == Where::kParked) {
      waiting.push_back(ref);
    }
  }
  for (auto ref : waiting) release(entries_.at(ref), Outcome{}, "the worker is stopping");
}

void StreamWorker::hold_claim(const Entry& e) {
  std::lock_guard lock(claims_->mutex);
  claims_->held.insert(e.id);
}

void StreamWorker::forget(std::uint64_t ref) {
  auto it = entries_.find(ref);
  if (it == entries_.end()) return;
  {
    std::lock_guard lock(claims_->mutex);
    claims_->held.erase(it->second.id);
  }
  ready_.erase(std::remove(ready_.begin(), ready_.end(), ref), ready_.end());
  entries_.erase(it);
}

void StreamWorker::taken_over(std::uint64_t ref, const std::string& why) {
  auto it = entries_.find(ref);
  if (it == entries_.end()) return;
  ++report_.taken_over;
  WorkerVerdict v{WorkerVerdict::Type::kTakenOver, it->second.id, it->second.delivery, "",
                  "not settled here: " + why};
  out_.on_verdict(it->second.task, Outcome{}, v);
  forget(ref);
}

Status StreamWorker::prepare(std::size_t free_slots) {
  reader_.drain();
  writer_.drain();
  const auto now = Clock::now();
  if (const int sig = stop_signals_.caught(); sig != 0 && !stopping_) {
    report_.stop_signal = sig;
    start_stopping(std::string(stop_signal_name(sig)));
  }
  if (!stopping_) intake(free_slots, now);
  run_due(now);
  review_parked();
  notice_breaker_change();
  return Status::ok();
}

void StreamWorker::intake(std::size_t free_slots, Clock::time_point now) {
  // Idle is counted from the first chance to read, not from construction: a
  // slow start (the sandbox's checks, a sanitizer build) is not idleness
  // (broke under ASan: --exit-when-idle 1s exited before its first read).
  if (!intake_started_) {
    intake_started_ = true;
    last_activity_ = now;
  }
  if (!entries_.empty() || in_flight_ > 0) last_activity_ = now;
  if (settings_.exit_when_idle && entries_.empty() && in_flight_ == 0 && !read_outstanding_ && !claim_outstanding_ &&
      now - last_activity_ >= *settings_.exit_when_idle) {
    start_stopping("nothing new or claimable for " + std::to_string(settings_.exit_when_idle->count()) + " ms");
    return;
  }
  if (breaker_.open()) return;  // intake paused: probes only (run_due)
  if (restart_check_pending_) return;  // a restarted Redis may have lost the group: nothing to read yet
  // One turn's worth read ahead (as many entries as there are slots), so
  // that a slot that comes free finds its next entry here instead of
  // waiting a round trip to Redis. They are delivered, hence counted, while
  // they wait: a worker that dies holds at most 2 x --jobs entries.
  slots_ = std::max(slots_, free_slots);
  const std::size_t waiting = ready_.size();
  const std::size_t room = free_slots > 0 ? free_slots + slots_ : 0;
  const std::size_t want = room > waiting ? room - waiting : 0;
  if (want == 0 || solo_running_) return;
  if (!claim_outstanding_ && now >= next_claim_at_) {
    claim_outstanding_ = true;
    next_claim_at_ = now + clamp(settings_.claim_idle / 4, std::chrono::milliseconds(100), std::chrono::milliseconds(5000));
    writer_.post([this, want, keys = settings_.keys, consumer = settings_.consumer, idle = settings_.claim_idle,
                  start = claim_cursor_](RedisConnection& redis) -> BrokerLink::Done {
      auto c = claim_idle(redis, keys, consumer, idle, start, want);
      return [this, c = std::move(c)]() mutable {
        claim_outstanding_ = false;
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
        if (!r) return on_error(r.error());
        for (auto& d : *r) admit(std::move(d), false);
      };
    });
  }
}

void StreamWorker::claimed_again(Entry& e, const Delivery& d) {
  // Its own claim scan took it over from itself (its claim lapsed while
  // Redis was away, or someone made it look idle: XCLAIM ... IDLE). Not a
  // second copy (two runs): the one here goes on at the new count.
  ++report_.claimed_again;
  const std::int64_t mine = e.delivery;
  e.delivery = d.count;
  // The delivery this worker holds it at is marked, so that it is not
  // counted as one that never reported back; deliveries in between (when
  // another worker had it) keep what they have. The running attempt's
  // outcome is recorded at the new count.
  if (!judgeable(mine)) return;
  const auto note = recorded_release(static_cast<std::uint32_t>(mine), settings_.consumer.name, wall_ms(),
                                     "claimed again by the worker that held it (its renewal came late)");
  if (e.history.recorded.empty() || e.history.recorded.back().delivery != mine) {
    writer_.post([this, keys = settings_.keys, consumer = settings_.consumer, id = e.id, mine,
                  json = delivery_json(note)](RedisConnection& redis) -> BrokerLink::Done {
      auto r = record_delivery(redis, keys, consumer, id, mine, json);
      return [this, r = std::move(r)]() {
        if (!r) on_error(r.error());
      };
    });
  }
}

void StreamWorker::admit(Delivery d, bool claimed) {
  for (auto& [ref, held] : entries_) {
    if (held.id == d.entry) return claimed_again(held, d);
  }
  ++report_.deliveries;
  if (claimed) ++report_.claimed;
  last_activity_ = Clock::now();
  const std::uint64_t ref = ++next_ref_;
  Entry& e = entries_[ref];
  e.task.ref = ref;
  read_entry(d, e);
  hold_claim(e);
  if (stopping_) {
    // Read as the worker began to stop: not run here.
    release(e, Outcome{}, "the worker is stopping");
    return;
  }
  if (auto refused = check_entry(settings_, d, e)) {
    if (refused->protocol_error) ++report_.protocol_errors;
    dead_letter(e, refused->outcome, refused->reason);
    return;
  }
  e.solo = e.history.last_lost;
  e.where = Where::kReady;
  if (e.solo) {
    ready_.push_front(ref);  // suspects first, alone
  } else {
    ready_.push_back(ref);
  }
}

void StreamWorker::run_due(Clock::time_point now) {
  std::vector<std::uint64_t> due;
  for (auto& [ref, e] : entries_) {
    if (e.where == Where::kDelayed && e.due <= now) due.push_back(ref);
  }
  for (auto ref : due) redeliver_now(entries_.at(ref));
  if (breaker_.open() && !stopping_) probe(now);
}

void StreamWorker::probe(Clock::time_point now) {
  if (breaker_.waited_too_long(now)) {
    // Held entries go back to the fleet: healthy workers take them over.
    std::vector<std::uint64_t> held;
    for (auto& [ref, e] : entries_) {
      if (e.where == Where::kOutageHeld) held.push_back(ref);
    }
    if (held.size() > 1) {
      out_.on_notice("handler outage suspected for longer than --breaker-max-wait: " + std::to_string(held.size() - 1) +
                     " held entries released to other workers");
      for (std::size_t i = 1; i < held.size(); ++i) release(entries_.at(held[i]), Outcome{}, "outage here: left to other workers");
    }
  }
  if (!breaker_.may_probe(now) || in_flight_ > 0) return;
  if (known_good_) {
    breaker_.probe_started();
    probe_copy_running_ = true;
    return;  // next() hands out the copy
  }
  for (auto& [ref, e] : entries_) {
    if (e.where == Where::kOutageHeld) {
      // Run again at the same delivery, not delivered again: an outage of
      // hours must not grow the entry's delivery count and history by one
      // per probe. Its record (held, uncharged) is overwritten by the
      // probe's. The price: a probe that kills this worker is not counted.
      breaker_.probe_started();
      e.probe = true;
      e.where = Where::kReady;
      ready_.push_front(ref);
      return;
    }
  }
}

TaskSource::Item StreamWorker::next() {
  Item item;
  if (probe_copy_running_ && probe_copy_ref_ == 0 && known_good_) {
    probe_copy_ref_ = ++next_ref_;
    item.type = Item::Type::kTask;
    item.task = *known_good_;
    item.task.ref = probe_copy_ref_;
    ++in_flight_;
    return item;
  }
  if (!solo_running_) {
    if (auto pick = next_ready(); pick != ready_.end()) {
      Entry& e = entries_.at(*pick);
      ready_.erase(pick);
      if (e.solo && e.start_recorded != e.delivery) {
        record_start(e);  // it comes back to ready_ once its start is recorded
        item.type = Item::Type::kWait;
        item.wake_at = wake_at(Clock::now());
        return item;
      }
      e.where = Where::kRunning;
      solo_running_ = e.solo;
      ++in_flight_;
      ++report_.attempts;
      item.type = Item::Type::kTask;
      item.task = e.task;
      return item;
    }
  }
  if (stopping_ && in_flight_ == 0 && entries_.empty() && reader_.outstanding() == 0 && writer_.outstanding() == 0) {
    item.type = Item::Type::kEnd;
    return item;
  }
  item.type = Item::Type::kWait;
  item.wake_at = wake_at(Clock::now());
  return item;
}

std::deque<std::uint64_t>::iterator StreamWorker::next_ready() {
  // While the breaker is open only its probe runs.
  if (breaker_.open()) {
    return std::find_if(ready_.begin(), ready_.end(), [this](std::uint64_t ref) { return entries_.at(ref).probe; });
  }
  // A suspect (its last delivery never reported back) runs alone, and
  // nothing new starts before it has.
  const auto suspect =
      std::find_if(ready_.begin(), ready_.end(), [this](std::uint64_t ref) { return entries_.at(ref).solo; });
  if (suspect != ready_.end()) return in_flight_ == 0 ? suspect : ready_.end();
  return ready_.begin();
}

std::optional<StreamWorker::Clock::time_point> StreamWorker::wake_at(Clock::time_point now) const {
  std::optional<Clock::time_point> at;
  auto earliest = [&](Clock::time_point t) { at = at ? std::min(*at, t) : t; };
  for (const auto& [ref, e] : entries_) {
    if (e.where == Where::kDelayed) earliest(e.due);
  }
  if (!stopping_) {
    if (!claim_outstanding_ && !breaker_.open()) earliest(std::max(now, next_claim_at_));
    if (breaker_.open()) {
      if (auto p = breaker_.next_probe_at()) earliest(*p);
    }
    if (settings_.exit_when_idle) earliest(last_activity_ + *settings_.exit_when_idle);
  }
  return at;
}

std::vector<int> StreamWorker::wait_fds() const { return {reader_.wait_fd(), writer_.wait_fd()}; }

void StreamWorker::on_outcome(const Task& task, const Outcome& reported) {
  // The setup rule (a failure without the payload read is never charged;
  // all of them so: stop) is the run's, which can stop. A worker cannot:
  // uncharged, such failures would go round the fleet for ever. Here they
  // count as any failure, and the breaker holds a fleet whose command
  // fails on its own setup, as it holds any outage. (One engine for both:
  // issue 27.)
  std::optional<Outcome> unread_as_any;
  if (reported.payload_unread) {
    unread_as_any = reported;
    unread_as_any->payload_unread = false;
  }
  const Outcome& outcome = unread_as_any ? *unread_as_any : reported;
  if (in_flight_ > 0) --in_flight_;
  const auto now = Clock::now();
  if (task.ref == probe_copy_ref_ && probe_copy_ref_ != 0) {
    // A known-good payload run again: only an answer for the breaker.
    probe_copy_ref_ = 0;
    probe_copy_running_ = false;
    const bool ok = outcome.kind == Kind::kOk;
    breaker_.probe_ended(ok, now, true);
    notice_breaker_change();
    return;
  }
  auto it = entries_.find(task.ref);
  if (it == entries_.end()) return;
  Entry& e = it->second;
  if (e.solo) solo_running_ = false;
  e.where = Where::kBusy;
  const std::string payload_id = task.key + "\n" + sha256_hex(task.payload);
  const bool was_probe = std::exchange(e.probe, false);
  if (outcome.kind == Kind::kOk) {
    breaker_.record(payload_id, false, "", now);  // any success closes it
    if (was_probe) breaker_.probe_ended(true, now);
    notice_breaker_change();
    if (task.payload.size() <= kMaxKnownGood) known_good_ = Task{task.key, task.payload, 0};
    settle_ok(e, outcome);
    return;
  }
  const bool transient = is_transient(settings_.retry, outcome);
  // The hidden-path rule takes an entry's failure at its word once in this
  // worker (a poison pill can print such a line): again, it is judged like
  // any failure.
  std::string hidden;
  if (!transient && settings_.hidden_path && hidden_path_claimed_.count(payload_id) == 0) {
    hidden = settings_.hidden_path(outcome);
    if (!hidden.empty()) hidden_path_claimed_.insert(payload_id);
  }
  const bool opened_for_hidden = !hidden.empty() && breaker_.open_now(payload_id, outcome.fingerprint, now);
  const bool opened = opened_for_hidden || (!transient && breaker_.record(payload_id, true, outcome.fingerprint, now));
  if (was_probe) breaker_.probe_ended(false, now);
  if (opened_for_hidden) {
    ++report_.outages;
    const std::string dir = share_for(hidden);
    out_.on_notice("handler outage suspected: " + why_hidden(hidden, outcome) +
                   "; intake paused, failures held uncharged, probing" +
                   (dir.empty() ? std::string() : "; restart the worker with --share " + dir + " to let tasks read it"));
  } else if (opened) {
    ++report_.outages;
    out_.on_notice("handler outage suspected: " + std::to_string(breaker_.failures_when_opened()) +
                   " recent payloads failed, mostly as " + std::string(to_string(outcome.kind)) + " " +
                   outcome.fingerprint + "; intake paused, failures held uncharged, probing");
  }
  notice_breaker_change();
  if (breaker_.open() && !transient) {
    // Not held against the payload: an outage explains it.
    hold_for_outage(e, outcome);
    return;
  }
  if (transient && counts_as_transient(outcome, e.slot_renewals)) ++e.transient_here;
  const auto current = recorded_outcome(e.delivery, settings_.consumer.name, wall_ms(), outcome, !transient, transient);
  const auto summaries = attempt_summaries(e.history, current);
  const Judgement j = judge(settings_.retry, summaries, outcome, e.transient_here);
  switch (j.decision) {
    case Decision::kQuarantine:
      if (settings_.breaker.enabled && breaker_.suspects(outcome.fingerprint)) {
        e.where = Where::kParked;
        e.parked_outcome = outcome;
        e.parked_reason = j.reason;
        return;
      }
      return dead_letter(e, outcome, j.reason);
    case Decision::kGiveUp:
      return release(e, outcome, j.reason + "; left pending for another worker");
    case Decision::kDone:
    case Decision::kRetry: {
      const auto failures = static_cast<std::uint32_t>(
          std::count_if(summaries.begin(), summaries.end(), [](const auto& a) { return a.finished && !a.kind.empty() && a.kind != "ok"; }));
      const std::uint64_t ref = e.task.ref;
      record(e, current, then(ref, [this, failures](Entry& again) { retry_later(again, failures); }));
      return;
    }
  }
}

void StreamWorker::notice_breaker_change() {
  const bool open = breaker_.open();
  if (breaker_was_open_ && !open) on_breaker_closed();
  breaker_was_open_ = open;
}

void StreamWorker::on_breaker_closed() {
  out_.on_notice("handler works again: intake resumes, held entries run again");
  for (auto& [ref, e] : entries_) {
    if (e.where == Where::kOutageHeld) {
      e.where = Where::kDelayed;
      e.due = Clock::now();
    }
  }
}

void StreamWorker::review_parked() {
  std::vector<std::uint64_t> parked;
  bool others = in_flight_ > 0 || !ready_.empty();
  for (auto& [ref, e] : entries_) {
    if (e.where == Where::kParked) parked.push_back(ref);
    if (e.where == Where::kDelayed || e.where == Where::kBusy) others = true;
  }
  for (auto ref : parked) {
    Entry& e = entries_.at(ref);
    if (breaker_.open()) {
      // The outage explains the failure: held, uncharged, like the rest.
      hold_for_outage(e, e.parked_outcome);
    } else if (!breaker_.suspects(e.parked_outcome.fingerprint) || !others) {
      // The suspicion faded, or nothing left here could confirm it.
      dead_letter(e, e.parked_outcome, e.parked_reason);
    }
  }
}

std::function<void()> StreamWorker::then(std::uint64_t ref, std::function<void(Entry&)> next) {
  return [this, ref, next = std::move(next)]() {
    auto it = entries_.find(ref);
    if (it == entries_.end()) return;
    if (stopping_) return release(it->second, Outcome{}, "the worker is stopping");
    next(it->second);
  };
}

void StreamWorker::hold_for_outage(Entry& e, const Outcome& outcome) {
  const auto d = recorded_outcome(e.delivery, settings_.consumer.name, wall_ms(), outcome, false, false,
                                  "held: handler outage suspected");
  record(e, d, then(e.task.ref, [this](Entry& held) {
           held.where = breaker_.open() ? Where::kOutageHeld : Where::kDelayed;
         }));
}

void StreamWorker::record(Entry& e, const RecordedDelivery& d, std::function<void()> after) {
  e.where = Where::kBusy;
  writer_.post([this, ref = e.task.ref, keys = settings_.keys, consumer = settings_.consumer, id = e.id,
                delivery = e.delivery, json = delivery_json(d),
                after = std::move(after)](RedisConnection& redis) -> BrokerLink::Done {
    auto r = record_delivery(redis, keys, consumer, id, delivery, json);
    const std::string why = r && !r->held ? why_not_held(redis, keys, consumer, id) : "";
    return [this, ref, r = std::move(r), why, after]() {
      if (!r) return on_entry_error(ref, r.error());
      if (!r->held) {
        auto it = entries_.find(ref);
        if (it == entries_.end()) return;
        if (it->second.released) return forget(ref);  // its verdict was given
        return taken_over(ref, why);
      }
      if (!r->history_type.empty()) {
        auto it = entries_.find(ref);
        if (it == entries_.end()) return;
        // A released entry is left as it is (the next worker to claim it
        // dead-letters it); any other is dead-lettered now.
        if (it->second.released) return forget(ref);
        ++report_.protocol_errors;
        const Refused refused =
            history_not_readable(settings_, it->second.id, r->history_type, "history not readable: not run again");
        return dead_letter(it->second, refused.outcome, refused.reason);
      }
      after();
    };
  });
  // What this worker knows of the history from now on (a probe's record
  // replaces the hold it ran from: same delivery).
  if (!e.history.recorded.empty() && e.history.recorded.back().delivery == d.delivery) {
    e.history.recorded.back() = d;
  } else {
    e.history.recorded.push_back(d);
  }
}

void StreamWorker::record_start(Entry& e) {
  e.where = Where::kBusy;
  solo_running_ = true;  // as while it runs: nothing else starts, nothing new is read
  const auto d = recorded_start(e.delivery, settings_.consumer.name, wall_ms());
  // Not added to e.history: the outcome (or a release) replaces the marker.
  writer_.post([this, ref = e.task.ref, keys = settings_.keys, consumer = settings_.consumer, id = e.id,
                delivery = e.delivery, json = delivery_json(d)](RedisConnection& redis) -> BrokerLink::Done {
    auto r = record_delivery(redis, keys, consumer, id, delivery, json);
    return [this, ref, delivery, r = std::move(r)]() {
      solo_running_ = false;
      if (!r) return on_entry_error(ref, r.error());
      auto it = entries_.find(ref);
      if (it == entries_.end()) return;
      Entry& e = it->second;
      if (!r->held) return taken_over(ref, "no longer held by this worker when its start was to be recorded");
      if (!r->history_type.empty()) {
        ++report_.protocol_errors;
        const Refused refused = history_not_readable(settings_, e.id, r->history_type, "history not readable: not run again");
        return dead_letter(e, refused.outcome, refused.reason);
      }
      if (stopping_) return release(e, Outcome{}, "the worker is stopping");
      e.start_recorded = delivery;
      e.where = Where::kReady;
      ready_.push_front(ref);
    };
  });
}

void StreamWorker::retry_later(Entry& e, std::uint32_t failures) {
  e.where = Where::kDelayed;
  e.due = Clock::now() + backoff_delay(settings_.retry, std::max<std::uint32_t>(failures, 1), rng_);
}

void StreamWorker::redeliver_now(Entry& e) {
  e.where = Where::kBusy;
  ++report_.retried;
  const std::uint64_t ref = e.task.ref;
  writer_.post([this, ref, keys = settings_.keys, consumer = settings_.consumer, id = e.id](RedisConnection& redis) -> BrokerLink::Done {
    auto r = redeliver(redis, keys, consumer, id);
    const std::string why = r && !*r ? why_not_held(redis, keys, consumer, id) : "";
    return [this, ref, why, r = std::move(r)]() mutable {
      if (!r) return on_entry_error(ref, r.error());
      auto it = entries_.find(ref);
      if (it == entries_.end()) return;
      if (!*r) return taken_over(ref, why);
      Entry& e = it->second;
      hold_claim(e);
      if (auto refused = check_redelivery(settings_, **r, e)) {
        ++report_.protocol_errors;
        return dead_letter(e, refused->outcome, refused->reason);
      }
      if (stopping_) return release(e, Outcome{}, "the worker is stopping");
      if (auto refused = lost_too_often(settings_, e)) return dead_letter(e, refused->outcome, refused->reason);
      e.solo = e.history.last_lost;
      e.where = Where::kReady;
      if (e.probe || e.solo) {
        ready_.push_front(ref);
      } else {
        ready_.push_back(ref);
      }
    };
  });
}

void StreamWorker::release(Entry& e, const Outcome& outcome, const std::string& why) {
  // Recorded, so that the next delivery is not counted as lost; then left
  // pending (not renewed) for whoever claims it after --claim-idle.
  const bool ran = e.where == Where::kBusy && outcome.kind != Kind::kOk;
  RecordedDelivery d = ran ? recorded_outcome(e.delivery, settings_.consumer.name, wall_ms(), outcome, false, true,
                                              "released: " + why)
                           : recorded_release(e.delivery, settings_.consumer.name, wall_ms(), "released: " + why);
  const bool already_recorded =
      !e.history.recorded.empty() && e.history.recorded.back().delivery == e.delivery;
  const std::uint64_t ref = e.task.ref;
  ready_.erase(std::remove(ready_.begin(), ready_.end(), ref), ready_.end());
  e.released = true;
  ++report_.released;
  e.released = true;
  WorkerVerdict v{WorkerVerdict::Type::kReleased, e.id, e.delivery, "", why};
  out_.on_verdict(e.task, outcome, v);
  {
    std::lock_guard lock(claims_->mutex);
    claims_->held.erase(e.id);
  }
  if (already_recorded) {
    forget(ref);
    return;
  }
  record(e, d, [this, ref] { forget(ref); });
}

void StreamWorker::settle_ok(Entry& e, const Outcome& outcome) {
  EntryFields fields = result_fields(settings_, e, outcome);
  const std::uint64_t ref = e.task.ref;
  writer_.post([this, ref, outcome, fields = std::move(fields), keys = settings_.keys, consumer = settings_.consumer,
                id = e.id, target = settings_.results ? settings_.keys.results : std::string(),
                maxlen = settings_.results_maxlen](RedisConnection& redis) -> BrokerLink::Done {
    auto r = settle(redis, keys, consumer, id, target, maxlen, fields);
    const std::string why = r && !*r ? why_not_held(redis, keys, consumer, id) : "";
    return [this, ref, outcome, why, r = std::move(r)]() {
      if (!r) return on_entry_error(ref, r.error());
      auto it = entries_.find(ref);
      if (it == entries_.end()) return;
      if (!*r) return taken_over(ref, why);
      results_written_.add(**r);
      ++report_.ok;
      WorkerVerdict v{WorkerVerdict::Type::kOk, it->second.id, it->second.delivery, **r, "ok"};
      out_.on_verdict(it->second.task, outcome, v);
      forget(ref);
    };
  });
}

void StreamWorker::dead_letter(Entry& e, const Outcome& outcome, const std::string& reason) {
  e.where = Where::kBusy;
  EntryFields fields = dead_letter_fields(settings_, e, outcome, reason, wall_ms());
  const std::uint64_t ref = e.task.ref;
  writer_.post([this, ref, outcome, reason, fields = std::move(fields), keys = settings_.keys,
                consumer = settings_.consumer, id = e.id](RedisConnection& redis) -> BrokerLink::Done {
    auto r = settle(redis, keys, consumer, id, keys.dlq, 0, fields);
    const std::string why = r && !*r ? why_not_held(redis, keys, consumer, id) : "";
    // Once it is in NAME:dlq: whether the fleet had seen the failure before.
    // Only a metric rides on it: when Redis cannot say, it is not new.
    bool is_new = false;
    if (r && *r) {
      auto added = note_dead_letter_fingerprint(redis, keys, fingerprint_label(std::string(to_string(outcome.kind)),
                                                                               outcome.fingerprint));
      is_new = added && *added;
    }
    return [this, ref, outcome, reason, why, is_new, r = std::move(r)]() {
      if (!r) return on_entry_error(ref, r.error());
      auto it = entries_.find(ref);
      if (it == entries_.end()) return;
      if (!*r) return taken_over(ref, why);
      dead_letters_written_.add(**r);
      ++report_.dead_lettered;
      WorkerVerdict v{WorkerVerdict::Type::kDeadLettered, it->second.id, it->second.delivery, **r, reason, is_new};
      out_.on_verdict(it->second.task, outcome, v);
      forget(ref);
    };
  });
}

}  // namespace pillbox::broker
