#include "supervisor/flow/task_flow.h"

#include <sys/resource.h>
#include <unistd.h>

#include <csignal>
#include <ctime>
#include <cstdlib>

#include "shared/sha256.h"
#include "supervisor/exec/host_view.h"
#include "supervisor/store/quarantine_entry.h"
#include "supervisor/store/quarantine_json.h"

namespace pillbox {
namespace {

// Test hook: the supervisor aborts while handling the outcome of a task whose
// payload contains this text, after its attempt was counted. It stands for a
// payload that kills the supervisor itself (a bug in symbolizing its crash,
// say); tests use it to show such a payload ends in quarantine.
const char* const kCrashHookEnv = "PILLBOX_TEST_CRASH_SUPERVISOR_ON";

Verdict verdict_of(Verdict::Type type, std::uint32_t attempts, std::string reason) {
  Verdict v;
  v.type = type;
  v.attempts = attempts;
  v.reason = std::move(reason);
  return v;
}

Outcome supervisor_lost(const std::string& handler_identity, std::uint32_t attempts) {
  Outcome o;
  o.kind = Kind::kSupervisorLost;
  o.message = "the supervisor died while this payload ran, " + std::to_string(attempts) + " times in a row";
  o.fingerprint = make_fingerprint(o.kind, "", {}, handler_identity);
  return o;
}

}  // namespace

TaskFlow::TaskFlow(FlowSettings settings, TaskSource& inner, VerdictSink& out, AttemptStore& store,
                   QuarantineCallback on_quarantine)
    : settings_(std::move(settings)),
      inner_(inner),
      out_(out),
      store_(store),
      can_(store.capabilities()),
      on_quarantine_(std::move(on_quarantine)),
      breaker_(settings_.breaker),
      rng_(settings_.seed ? *settings_.seed : std::random_device{}()) {
  if (const char* v = std::getenv(kCrashHookEnv); v != nullptr && *v != '\0') crash_hook_ = v;
}

TaskFlow::~TaskFlow() = default;

int TaskFlow::stop_signal() const { return stop_signals_.caught(); }

void TaskFlow::forget(std::uint64_t ref) {
  auto it = tracked_.find(ref);
  if (it == tracked_.end()) return;
  if (auto p = active_payloads_.find(it->second.payload_id); p != active_payloads_.end()) active_payloads_.erase(p);
  tracked_.erase(it);
}

std::uint64_t TaskFlow::track(Task task, std::string sha256, std::optional<store::LedgerTask> known) {
  const std::uint64_t ref = ++next_ref_;
  Tracked t;
  t.payload_id = task.key + "\n" + sha256;
  t.task = std::move(task);
  t.task.ref = ref;
  t.sha256 = std::move(sha256);
  if (known) {
    t.task_id = known->id;
    t.attempts = known->attempts;
    t.history = std::move(known->history);
    // A task that gave up in an earlier run gets a fresh budget (what failed
    // then was not the payload's fault): its old attempts are uncharged when
    // its next attempt starts, in the same transaction.
    if (known->state == store::TaskState::kGaveUp) {
      t.fresh_budget = true;
      for (auto& a : t.history) a.charged = false;
    }
    t.suspect = suspected_of_killing_the_supervisor(t.history);
  }
  active_payloads_.insert(t.payload_id);
  tracked_.emplace(ref, std::move(t));
  return ref;
}

Status TaskFlow::take_fresh(std::size_t want, std::vector<std::uint64_t>& starts) {
  while (starts.size() < want && !inner_done_) {
    TaskSource::Item item = inner_.next();
    switch (item.type) {
      case TaskSource::Item::Type::kEnd:
        inner_done_ = true;
        inner_waiting_ = false;
        return Status::ok();
      case TaskSource::Item::Type::kWait:
        inner_waiting_ = true;
        inner_wake_at_ = item.wake_at;
        return Status::ok();
      case TaskSource::Item::Type::kError:
        ++report_.input_errors;
        out_.on_input_error(item.error);
        continue;
      case TaskSource::Item::Type::kTask:
        break;
    }
    inner_waiting_ = false;
    if (!item.notice.empty()) out_.on_notice(item.notice);
    if (item.task.repeat_of_line != 0) {
      // The same key and payload as an earlier line of the input: one task.
      ++report_.skipped_repeats;
      out_.on_skipped(item.task, "repeats line " + std::to_string(item.task.repeat_of_line) + " of the input", 0);
      continue;
    }
    std::string sha = item.task.payload_sha256.empty() ? sha256_hex(item.task.payload) : item.task.payload_sha256;
    std::optional<store::LedgerTask> known;
    {
      auto found = store_.find(item.task, sha);
      if (!found) {
        // The back end cannot say what it knows (nor write what it held
        // back for it): the run stops.
        fatal_ = Status::error(found.error());
        return fatal_;
      }
      known = std::move(*found);
      // Done by the scripts as they were then: when they changed since (a
      // version of its own, not this run's), it is counted, and run again
      // only when asked (--rerun-outdated).
      const bool outdated = known && known->state == store::TaskState::kOk && !known->version.empty() &&
                            !settings_.identity.handler_version.empty() &&
                            known->version != settings_.identity.handler_version;
      if (outdated) {
        ++(settings_.rerun_outdated && !settings_.rerun_done ? report_.reran_outdated : report_.done_outdated);
        if (report_.outdated_scripts.empty()) report_.outdated_scripts = versioned_scripts();
      }
      if (known && known->state == store::TaskState::kOk && !settings_.rerun_done &&
          !(outdated && settings_.rerun_outdated)) {
        ++report_.skipped_done;
        out_.on_skipped(item.task,
                        outdated ? "already ok in the store, under another version of " + versioned_scripts() +
                                       " (--rerun-outdated runs it again)"
                                 : std::string("already ok in the store"),
                        0);
        if (settings_.done_results) tell_done_result(item.task, known->id);
        continue;
      }
      if (known && known->state == store::TaskState::kQuarantined) {
        ++report_.skipped_quarantined;
        out_.on_skipped(item.task, "already quarantined in the store", 0);
        continue;
      }
      if (known && !known->claimed_elsewhere.empty()) {
        skip_running_elsewhere(item.task, known->claimed_elsewhere);
        continue;
      }
    }
    if (can_.merges_repeats && active_payloads_.count(item.task.key + "\n" + sha) > 0) {
      // The same key and payload twice in one input: one task, run once.
      ++report_.skipped_repeats;
      out_.on_skipped(item.task, "repeats an earlier input of this run", 0);
      continue;
    }
    const bool rerun_outdated = known && known->state == store::TaskState::kOk;  // (only when asked: above)
    const std::uint64_t ref = track(std::move(item.task), std::move(sha), std::move(known));
    Tracked& t = tracked_.at(ref);
    t.rerun_outdated = rerun_outdated && !settings_.rerun_done;
    if (kills_the_supervisor(settings_.retry, t.history)) {
      quarantine(t, supervisor_lost(settings_.identity.handler_identity, settings_.retry.max_attempts),
                 "the supervisor crashed (a fatal signal of its own) during each of its last " +
                     std::to_string(settings_.retry.max_attempts) + " attempts");
      continue;
    }
    if (lost_without_evidence_too_often(settings_.retry, t.history)) {
      Outcome o;
      o.kind = Kind::kSupervisorLost;
      o.message = "pillbox died " + std::to_string(2 * settings_.retry.max_attempts) +
                  " times while this payload ran alone, each time with no sign that it crashed itself (a kill from "
                  "outside, the host's OOM killer)";
      settle(t, o, verdict_of(Verdict::Type::kGaveUp, t.attempts, o.message + ": not the payload's fault on that evidence, not quarantined; it runs again, "
                                       "with a fresh budget, in the next run"));
      continue;
    }
    if (t.suspect) {
      // Alone next time, so that if pillbox dies again, it is this payload.
      // Nothing new starts until the suspects have run.
      schedule_.add_suspect(ref);
      return Status::ok();
    }
    starts.push_back(ref);
  }
  return Status::ok();
}

std::string TaskFlow::versioned_scripts() const {
  const auto& names = settings_.identity.versioned_scripts;
  std::string list;
  for (std::size_t i = 0; i < names.size(); ++i) list += (i == 0 ? "" : i + 1 == names.size() ? " and " : ", ") + names[i];
  return list.empty() ? "the handler" : list;
}

void TaskFlow::tell_done_result(const Task& task, std::int64_t task_id) {
  std::optional<store::StoredResult> stored;
  std::string why_not = "its result was not kept (the run that did it kept none: --keep-results 0, or a pillbox "
                        "before results were kept)";
  if (auto found = store_.kept_result(task_id); !found) {
    why_not = "its result cannot be read: " + found.error();
  } else {
    stored = std::move(*found);
  }
  if (stored && stored->status == store::ResultStatus::kKept) {
    if (stored->origin.from_replay()) ++report_.done_from_replay;
    out_.on_done_result(task, &stored->data, "");
    return;
  }
  if (stored && stored->status == store::ResultStatus::kEvicted) {
    why_not = "its result (" + std::to_string(stored->size) + " bytes) was evicted to stay within --keep-results";
  } else if (stored && stored->status == store::ResultStatus::kTooLarge) {
    why_not = "its result (" + std::to_string(stored->size) + " bytes) was larger than --keep-results";
  }
  ++report_.done_without_result;
  out_.on_done_result(task, nullptr, why_not);
}

Status TaskFlow::prepare(std::size_t free_slots) {
  if (!fatal_.is_ok()) return fatal_;
  // The dispatcher committed the last turn already (commit_turn); a caller
  // that did not gets it done here, before this turn reads the ledger.
  if (auto s = commit_turn(); !s) return s;
  if (const int sig = stop_signal(); sig != 0) {
    report_.stop_signal = sig;
    if (can_.can_stop) return Status::error(std::string("interrupted by ") + stop_signal_name(sig));
    if (!winding_down_) wind_down();
  }
  if (!can_.can_stop && !winding_down_ && !store_.stopping().empty()) wind_down();
  lost_since_prepare_ = false;
  // The inner source's wish holds for the turn that asked it: a turn that
  // takes nothing new (slots full, the breaker open) must not wake at a
  // time it gave long ago, over and over.
  inner_wake_at_.reset();
  if (winding_down_) {
    // (Again after the flush: a start it answered is not handed out.)
    give_back_waiting("the worker is stopping");
    auto s = flush({}, /*release_held=*/true);
    give_back_waiting("the worker is stopping");
    return s;
  }
  const auto now = this->now();
  std::vector<std::uint64_t> starts;
  const std::size_t ready = schedule_.ready_count() + starting_.size();
  const std::size_t want = free_slots > ready ? free_slots - ready : 0;
  slot_free_ = want > 0;
  if (schedule_.solo_mode()) {
    if (want > 0) {
      // (A task still starting will run: it counts as in flight.)
      if (auto solo = schedule_.start_solo(in_flight_ + starting_.size())) starts.push_back(*solo);
    }
  } else if (breaker_.open()) {
    // Intake paused: one probe at a time.
    if (can_.can_stop && (breaker_.waited_too_long(now) || stop_at_next_turn_)) {
      if (!report_.stopped_by_breaker) stop_for_outage();
    } else {
      if (!can_.can_stop && breaker_.waited_too_long(now)) give_back_held();
      if (want > 0 && breaker_.may_probe(now)) {
        if (auto s = start_probe(starts, now); !s) return s;
      }
    }
  } else {
    for (std::uint64_t ref : schedule_.take_due(now, want)) starts.push_back(ref);
    if (auto s = take_fresh(want, starts); !s) return s;
  }
  // A slot stays free: nothing to start now, so no start comes soon to share
  // a transaction with; what is held is written now.
  const bool slot_left_free = free_slots > ready + starts.size();
  // The turn's transaction stays open while the dispatcher launches its
  // starts: it commits in commit_turn(), while the children fork.
  return flush(starts, slot_left_free, starts.empty() ? AttemptStore::Commit::kNow : AttemptStore::Commit::kLeaveOpen);
}

Status TaskFlow::commit_turn() {
  if (!fatal_.is_ok()) return fatal_;
  if (!store_.turn_open()) return Status::ok();
  std::vector<OpenStart> starts = std::exchange(open_starts_, {});
  if (auto s = store_.commit_turn(); !s) {
    // The turn's starts are not counted: none of its tasks may get its
    // payload, and the run stops (the dispatcher returns this error). Their
    // attempts never were: finish() must not end them as interrupted (the
    // ids may be another process's rows by then).
    for (const OpenStart& o : starts) {
      auto it = tracked_.find(o.ref);
      if (it == tracked_.end()) continue;
      Tracked& t = it->second;
      if (!t.history.empty()) t.history.pop_back();
      if (t.attempts_in_run > 0) --t.attempts_in_run;
      t.attempts = o.attempts_before;
      t.task_id = o.task_id_before;
    }
    fatal_ = s;
    return fatal_;
  }
  return Status::ok();
}

void TaskFlow::add_ok(const Tracked& t, LedgerWrite write) {
  const bool ran_alone = !t.history.empty() && t.history.back().solo;
  store_.add_ok(t.task_id, std::move(write), !ran_alone && !schedule_.solo_mode(), now());
}

Status TaskFlow::flush(const std::vector<std::uint64_t>& starts, bool release_held, AttemptStore::Commit when) {
  if (auto s = commit_turn(); !s) return s;
  // Before anything runs alone, what ended ok is durable: a solo task must
  // be the only unfinished one if the supervisor dies.
  bool release = release_held || schedule_.solo_mode();
  std::vector<StartAttempt> start_writes;
  for (std::uint64_t ref : starts) {
    const Tracked& t = tracked_.at(ref);
    release = release || schedule_.is_solo(ref);
    start_writes.push_back(StartAttempt{ref, t.task.key, t.sha256, static_cast<std::int64_t>(t.task.payload.size()),
                                        schedule_.is_solo(ref), t.fresh_budget,
                                        settings_.rerun_done || t.rerun_outdated, t.task_id == 0, t.task_id,
                                        t.attempts});
  }
  auto result = store_.apply(std::move(start_writes), release, when, now());
  if (!result) {
    // Nothing of the turn is written, and nothing runs whose attempt is not
    // counted: the run stops.
    fatal_ = Status::error(result.error());
    return fatal_;
  }
  BatchResult applied = std::move(*result);
  // Until its start is answered (in this apply or a later one), a task is
  // starting: in no place of the schedule, holding its slot.
  starting_.insert(starts.begin(), starts.end());
  for (const StartedAttemptOf& started : applied.started) {
    if (starting_.erase(started.ref) == 0) continue;  // cannot be: answered twice
    Tracked& t = tracked_.at(started.ref);
    if (started.n != 0 && store_.turn_open()) open_starts_.push_back({started.ref, t.task_id, t.attempts});
    t.task_id = started.task_id;
    t.attempts = started.n;
    t.fresh_budget = false;
    if (started.n != 0) {
      store::AttemptSummary a;
      a.n = t.attempts;
      a.solo = schedule_.is_solo(started.ref);
      t.history.push_back(a);
      ++t.attempts_in_run;
      schedule_.make_ready(started.ref);
      continue;
    }
    if (!started.claimed_elsewhere.empty()) {
      skip_running_elsewhere(t.task, started.claimed_elsewhere);
    } else {
      // Another pillbox finished it meanwhile.
      if (started.state == store::TaskState::kOk) ++report_.skipped_done;
      else ++report_.skipped_quarantined;
      out_.on_skipped(t.task, "already " + std::string(store::to_string(started.state)) + " in the store (by another pillbox process)", 0);
    }
    if (t.probe) breaker_.probe_ended(false, now());  // no evidence either way: probe again later
    schedule_.end_solo(started.ref);
    forget(started.ref);
  }
  // Verdicts that name a record are told only now that the record exists.
  for (QuarantineWritten& q : applied.quarantined) {
    const bool told = tell_answered(q.ref, [&](Verdict& verdict) {
      verdict.record_id = q.record_id;
      verdict.settled_as = q.settled_as;
      verdict.new_fingerprint = q.new_fingerprint;
      verdict.folded = q.folded;
      ++report_.quarantined;
      if (verdict.new_fingerprint) ++report_.new_fingerprints;
      const auto& waiting = awaiting_answer_.at(q.ref);
      if (verdict.record_id != 0 && !verdict.folded) remember_poison(tracked_.at(q.ref), verdict.record_id, waiting.outcome);
    });
    if (told && on_quarantine_ && !q.record_json.empty()) on_quarantine_(q.record_json, q.new_fingerprint);
  }
  for (const TaskSettled& s : applied.settled) {
    tell_answered(s.ref, [&](Verdict& verdict) { verdict.settled_as = s.settled_as; });
  }
  // Last: a task settled in the same answers is told as settled, not lost.
  for (const TaskLost& lost : applied.lost) lose(lost);
  return Status::ok();
}

bool TaskFlow::tell_answered(std::uint64_t ref, const std::function<void(Verdict&)>& complete) {
  auto waiting = awaiting_answer_.find(ref);
  auto it = tracked_.find(ref);
  if (waiting == awaiting_answer_.end() || it == tracked_.end()) {
    // Cannot be (the flow forgets a task only once its verdict is told),
    // but a verdict left waiting would keep the run from ending.
    if (waiting != awaiting_answer_.end()) awaiting_answer_.erase(waiting);
    return false;
  }
  complete(waiting->second.verdict);
  out_.on_verdict(it->second.task, waiting->second.outcome, waiting->second.verdict);
  awaiting_answer_.erase(waiting);
  forget(ref);
  return true;
}

TaskSource::Item TaskFlow::next() {
  TaskSource::Item item;
  if (auto ref = schedule_.take_ready()) {
    Tracked& t = tracked_.at(*ref);
    ++in_flight_;
    t.running = true;
    t.openings_at_start = breaker_.times_opened();
    item.type = TaskSource::Item::Type::kTask;
    item.task = t.task;
    return item;
  }
  // While open, held tasks wait for a probe; once the input is used up, only
  // a known-good probe can still end the outage (until --breaker-max-wait).
  const bool can_still_probe = breaker_.open() && known_good_ && !report_.stopped_by_breaker;
  const std::size_t held = schedule_.held_count();
  bool nothing_left = inner_done_ && in_flight_ == 0 && starting_.empty() && schedule_.quiet() &&
                      (held == 0 || (breaker_.open() && !can_still_probe) || !report_.stopped_for_setup.empty());
  if (nothing_left && schedule_.has_parked()) {
    // Nothing left can decide (nothing succeeded in this run): the parked
    // tasks' verdict stands.
    quarantine_parked();
  }
  nothing_left = nothing_left && !schedule_.has_parked();
  if (!can_.can_stop && !nothing_left && schedule_.has_parked() && in_flight_ == 0 && starting_.empty() &&
      schedule_.ready_count() == 0 && schedule_.quiet() && schedule_.held_count() == 0 && !breaker_.open()) {
    // A back end that cannot stop reads on for ever: nothing in hand can
    // decide (nothing runs or waits to), so the parked tasks' verdict stands.
    quarantine_parked();
  }
  if (nothing_left) {
    if (store_.idle() && awaiting_answer_.empty()) {
      item.type = TaskSource::Item::Type::kEnd;
      return item;
    }
    // Outcomes of this turn are not yet durable: flush now rather than wait
    // for a wake-up that nothing would send. (On failure flush sets fatal_.)
    (void)flush({}, /*release_held=*/true);
    if (!fatal_.is_ok()) {
      item.type = TaskSource::Item::Type::kWait;
      item.wake_at = now();
      return item;
    }
    // A back end whose answers come later may still owe some (a settle, a
    // dead letter): the run ends once they are in, told.
    if (store_.idle() && awaiting_answer_.empty()) return item;  // kEnd
    item.type = TaskSource::Item::Type::kWait;
    item.wake_at = wake_at();
    return item;
  }
  item.type = TaskSource::Item::Type::kWait;
  item.wake_at = wake_at();
  return item;
}

std::vector<int> TaskFlow::wait_fds() const {
  // The back end's answers (one whose writes complete later), and the
  // inner source's input while intake is open.
  std::vector<int> fds = store_.wait_fds();
  const bool intake_open = !breaker_.open() || breaker_.may_probe(now());
  if (inner_waiting_ && intake_open) {
    const std::vector<int> inner = inner_.wait_fds();
    fds.insert(fds.end(), inner.begin(), inner.end());
  }
  return fds;
}

std::optional<TaskFlow::Clock::time_point> TaskFlow::wait_at_earliest(std::optional<Clock::time_point> a,
                                                                       std::optional<Clock::time_point> b) {
  if (!a) return b;
  if (!b) return a;
  return std::min(*a, *b);
}

std::optional<TaskFlow::Clock::time_point> TaskFlow::wake_at() const {
  const auto now = this->now();
  std::optional<Clock::time_point> when;
  // Something for prepare() to do right away: this turn's ledger writes, a
  // suspect that may now run alone, or the slot of a task lost since.
  // (A verdict awaiting its answer wakes by has_unapplied or the wait fds.)
  if (store_.has_unapplied() || schedule_.suspect_may_start(in_flight_ + starting_.size()) ||
      lost_since_prepare_) {
    when = now;
  }
  // Held ok writes are written by then at the latest, with or without a start.
  when = wait_at_earliest(when, store_.due_by());
  // The inner source's own wish (a source that is not a file may have one).
  if (inner_waiting_) when = wait_at_earliest(when, inner_wake_at_);
  // While a suspect runs alone (or waits to) prepare() starts nothing else
  // and checks no other deadline: waking for a due retry or the breaker's
  // limit would only spin until the solo task ends, which wakes the
  // dispatcher anyway.
  if (schedule_.solo_mode()) return when;
  // A retry falling due needs a slot: with none free (every one running, or
  // holding a start the back end has yet to answer), what frees one wakes
  // the dispatcher anyway (an outcome, the back end's answer).
  if (!breaker_.open() && slot_free_) when = wait_at_earliest(when, schedule_.next_due());
  // A probe already due waits for input (wait_fds() has the source's fds
  // then); asking to be woken at a time past would spin.
  if (breaker_.open() && (!inner_done_ || known_good_) && !breaker_.may_probe(now)) {
    when = wait_at_earliest(when, breaker_.next_probe_at());
  }
  // (A back end that cannot stop gives held tasks back from then on, as
  // they come: no wake-up of its own.)
  if (breaker_.open() && settings_.breaker.max_wait.count() > 0 && !report_.stopped_by_breaker &&
      (can_.can_stop || !breaker_.waited_too_long(now))) {
    when = wait_at_earliest(when, breaker_.opened_at() + settings_.breaker.max_wait);
  }
  return when;
}

void TaskFlow::on_outcome(const Task& task, const Outcome& reported) {
  auto it = tracked_.find(task.ref);
  if (it == tracked_.end()) return;
  Tracked& t = it->second;
  t.running = false;
  if (t.lost) {
    // Lost while it ran (lose): no verdict of ours, nothing recorded.
    if (in_flight_ > 0) --in_flight_;
    schedule_.end_solo(t.task.ref);
    forget(t.task.ref);
    return;
  }
  // "Never read" is the command's fault, not the payload's, until the
  // command has shown it works: then a payload failing unread a second time
  // in this run is charged as any failure (refused by its name or size, say),
  // so that it cannot dodge its verdict run after run. A back end that
  // cannot stop has no setup rule: uncharged, such failures would go round
  // the fleet for ever, so they count as any failure there.
  std::optional<Outcome> unread_as_any;
  if (reported.payload_unread && !t.probe_copy) {
    ++t.unread_in_run;
    if (!can_.can_stop || (t.unread_in_run > 1 && command_works_)) {
      unread_as_any = reported;
      unread_as_any->payload_unread = false;
    }
  }
  const Outcome& outcome = unread_as_any ? *unread_as_any : reported;
  if (!crash_hook_.empty() && t.task.payload.find(crash_hook_) != std::string::npos) {
    const rlimit no_core{0, 0};
    ::setrlimit(RLIMIT_CORE, &no_core);  // a test crash leaves no core file behind
    std::abort();
  }
  if (in_flight_ > 0) --in_flight_;
  if (t.probe_copy && t.check) return on_check_outcome(t, outcome);
  if (t.probe_copy && !t.recheck_of.empty()) return on_recheck_outcome(t, outcome);
  if (t.probe_copy) return on_probe_copy_outcome(t, outcome);
  schedule_.end_solo(t.task.ref);
  t.suspect = false;
  const auto now = this->now();
  const bool failed = outcome.kind != Kind::kOk;
  const bool transient = failed && is_transient(settings_.retry, outcome);
  if (transient && counts_as_transient(outcome, t.slot_renewals)) ++t.transient_in_run;

  // The setup rule (issue 26, point 4): a command that fails on its own
  // setup fails every task without reading it; after a few distinct
  // payloads, and none showing the command works, the run stops.
  // Only a payload's first attempt counts: a held task that fails unread
  // again (a file the command rejects by name) must not stop every later
  // run before any new payload is tried. Nor does an exit code the operator
  // calls transient, nor a hidden file of the host (the hidden-path rule's).
  const bool declared_transient = outcome.kind == Kind::kHandlerError && outcome.exit_code >= 0 &&
                                  settings_.retry.retry_exit_codes.count(outcome.exit_code) > 0;
  const bool unread_hidden = failed && outcome.payload_unread && settings_.hidden_path && settings_.breaker.enabled &&
                             !breaker_.verified(outcome.fingerprint) && hidden_path_claimed_.count(t.payload_id) == 0 &&
                             !settings_.hidden_path(outcome).empty();
  if (failed && outcome.payload_unread) {
    if (t.history.size() == 1 && !declared_transient && !unread_hidden) unread_failures_.insert(t.payload_id);
  } else if (!failed || !outcome.before_payload) {
    command_works_ = true;
  }
  constexpr std::size_t kUnreadFailuresToStop = 3;
  const bool setup_broken = !command_works_ && unread_failures_.size() >= kUnreadFailuresToStop;

  store::AttemptSummary& attempt = t.history.back();
  attempt.finished = true;
  attempt.kind = std::string(to_string(outcome.kind));
  attempt.fingerprint = outcome.fingerprint;

  if (setup_broken || (!report_.stopped_for_setup.empty() && failed)) {
    attempt.charged = false;
    store_.add(EndAttempt{t.task_id, attempt.n, outcome_record(outcome), false, transient, outcome.stderr_tail});
    t.last_failure = outcome;
    schedule_.hold(t.task.ref);
    note_wait(t, 0, true);
    if (report_.stopped_for_setup.empty()) stop_for_setup(outcome);
    return;
  }
  bool outage = false;
  const bool was_probe = std::exchange(t.probe, false);
  if (!failed) remember_good(t);
  if (!failed) any_success_ = true;
  if (breaker_.open()) {
    if (was_probe) {
      breaker_.probe_ended(!failed, now);
    } else if (failed || t.openings_at_start == breaker_.times_opened()) {
      // A success of a task handed out before this opening is older news
      // than the failure that opened it (a known-good check that failed
      // while it ran: CI saw such a task close the breaker at once, and the
      // outage's next victim quarantined before it opened again): it
      // does not close the breaker; a probe answers.
      breaker_.record(t.payload_id, failed, outcome.fingerprint, now);
    }
    outage = failed;
    if (failed) corroborate_hidden(t, outcome);
    if (!breaker_.open()) {
      release_held();
    } else if (was_probe) {
      report_pause(now, &outcome);
    }
  } else if (const std::string hidden = failed && (!transient || unread_hidden) ? hidden_path_once(t, outcome) : "";
             !hidden.empty() && breaker_.open_now(t.payload_id, outcome.fingerprint, now)) {
    outage = true;
    hidden_ = hidden;
    on_breaker_opened(outcome);
  } else {
    // With a payload known to work at hand, the window asks before it opens
    // (check_before_opening): bad inputs in their retries fill it as an
    // outage does.
    std::string check_for;
    if (breaker_.record(t.payload_id, failed, outcome.fingerprint, now, known_good_ ? &check_for : nullptr)) {
      outage = true;
      hidden_.clear();
      on_breaker_opened(outcome);
    } else if (!check_for.empty()) {
      check_before_opening(check_for);
    }
  }
  // A success may be the first of the run: a decision waiting for a payload
  // known to work can start its check.
  if (!failed) start_check_if_due();
  attempt.charged = !outage && !transient;
  {
    // An ok attempt's end goes with its "ok" (settle): both held back, or neither.
    EndAttempt end{t.task_id, attempt.n, outcome_record(outcome), attempt.charged, transient, outcome.stderr_tail};
    if (!failed && !outage) {
      add_ok(t, std::move(end));
    } else {
      store_.add(std::move(end));
    }
  }
  if (outage) {
    // A handler that flaps (down, up again as a known-good probe passes,
    // down) would hold and release the same tasks for ever, none of their
    // failures charged: past a few outages in this run, a task gives up
    // until the next run (found by the flow's random runs).
    constexpr std::uint32_t kOutagesPerTask = 3;
    if (++t.outages_in_run > kOutagesPerTask) {
      settle(t, outcome,
             verdict_of(Verdict::Type::kGaveUp, t.attempts, "failed in " + std::to_string(t.outages_in_run) +
                         " suspected handler outages in this run (a handler that fails and recovers by turns?); not "
                         "charged, it runs again in the next run over the same store"));
      return;
    }
    t.last_failure = outcome;
    schedule_.hold(t.task.ref);
    note_wait(t, 0, true);
    return;
  }
  if (!failed) {
    settle(t, outcome, verdict_of(Verdict::Type::kOk, t.attempts, "ok"));
    return;
  }
  const Judgement j = judge(settings_.retry, t.history, outcome, t.transient_in_run);
  switch (j.decision) {
    case Decision::kRetry: {
      t.last_failure = outcome;
      const auto failures = static_cast<std::uint32_t>(std::count_if(
          t.history.begin(), t.history.end(), [](const store::AttemptSummary& a) { return a.finished && a.charged; }));
      const auto delay = backoff_delay(settings_.retry, failures, rng_);
      schedule_.delay(t.task.ref, now + delay);
      note_wait(t, store::now_ms() + delay.count(), false);
      return;
    }
    case Decision::kQuarantine:
      if (waits_for_decision(outcome)) {
        // Other payloads failed just like this one: poison, or an outage?
        // Parked, without running again (retries would crowd out the fresh
        // payloads), until the check decides (PendingDecision).
        t.last_failure = outcome;
        t.parked_reason = j.reason;
        schedule_.park(t.task.ref);
        start_check_if_due();
        return;
      }
      quarantine(t, outcome, j.reason);
      return;
    case Decision::kGiveUp:
      settle(t, outcome, verdict_of(Verdict::Type::kGaveUp, t.attempts, j.reason));
      return;
    case Decision::kDone:
      settle(t, outcome, verdict_of(Verdict::Type::kOk, t.attempts, "ok"));
      return;
  }
}

void TaskFlow::lose(const TaskLost& lost) {
  const std::uint64_t ref = lost.ref;
  auto it = tracked_.find(ref);
  if (it == tracked_.end() || it->second.lost) return;
  Tracked& t = it->second;
  const auto& parked = schedule_.parked();
  if (std::find(parked.begin(), parked.end(), ref) != parked.end() && t.last_failure) {
    // One fewer parked task for its decision; none left, nothing to decide
    // (its rechecks' answers, if any are out, then find no decision).
    if (auto d = pending_.find(t.last_failure->fingerprint); d != pending_.end() && d->second.parked > 0 &&
                                                               --d->second.parked == 0) {
      breaker_.set_deciding(d->first, false);
      pending_.erase(d);
    }
  }
  schedule_.remove(ref);
  // Running alone, it still does until its outcome comes (on_outcome).
  if (!t.running) schedule_.end_solo(ref);
  starting_.erase(ref);
  awaiting_answer_.erase(ref);
  // A probe lost says nothing either way: the next one comes later.
  if (std::exchange(t.probe, false)) breaker_.probe_ended(false, now());
  out_.on_lost(t.task, lost);
  lost_since_prepare_ = true;
  if (t.running) {
    t.lost = true;
    if (lost.stop_child) stopped_.push_back(ref);
    return;
  }
  forget(ref);
}

void TaskFlow::skip_running_elsewhere(const Task& task, const std::string& claim) {
  ++report_.running_elsewhere;
  out_.on_skipped(task, "running elsewhere: another pillbox process (" + claim + ") runs it now; the verdict is its own", 0);
}

void TaskFlow::note_wait(const Tracked& t, std::int64_t next_retry_at_ms, bool held) {
  if (t.task_id != 0) store_.add(SetTaskWait{t.task_id, next_retry_at_ms, held});
}

void TaskFlow::settle(Tracked& t, const Outcome& outcome, Verdict verdict) {
  if (t.attempts_in_run > 1) ++report_.retried;
  if (verdict.type == Verdict::Type::kOk) {
    // Where its attempt's end went (on_outcome): both held back, or neither.
    store_.add_ok(t.task_id, SetTaskState{t.task_id, store::TaskState::kOk}, false, now());
    // With "ok": a task the back end has as done has its result kept (or
    // says why not), never the one without the other.
    store_.add_ok(t.task_id, KeepResult{t.task_id, outcome.output}, false, now());
  }
  if (verdict.type == Verdict::Type::kGaveUp) store_.add(SetTaskState{t.task_id, store::TaskState::kGaveUp});
  if (verdict.type == Verdict::Type::kGaveUp) ++report_.gave_up;
  if (verdict.type == Verdict::Type::kPoison) ++report_.quarantined;
  if (verdict.type == Verdict::Type::kOk && can_.tells_ok_when_settled) {
    // Told with where its result went, once the back end answers.
    awaiting_answer_[t.task.ref] = AwaitingAnswer{outcome, std::move(verdict)};
    return;
  }
  // Told before the ledger says "ok": after a crash in between, the result
  // comes twice, never not at all.
  out_.on_verdict(t.task, outcome, verdict);
  forget(t.task.ref);
}

void TaskFlow::quarantine(Tracked& t, const Outcome& outcome, const std::string& reason) {
  if (!can_.keeps_records) {
    remember_poison(t, 0, outcome);
    settle(t, outcome, verdict_of(Verdict::Type::kPoison, t.attempts, reason + " (not kept: no store)"));
    return;
  }
  if (t.attempts_in_run > 1) ++report_.retried;
  const Verdict verdict = verdict_of(Verdict::Type::kQuarantined, t.attempts, reason);
  awaiting_answer_[t.task.ref] = AwaitingAnswer{outcome, verdict};
  store_.add(QuarantinePayload{t.task.ref, t.task_id, t.task.key, t.sha256, t.task.payload, t.attempts, outcome, reason});
}

void TaskFlow::on_breaker_opened(const Outcome& outcome, bool probe_at_once) {
  ++report_.outages;
  outage_example_ = outage_example(outcome);
  drop_decisions();
  // Retries waiting for their backoff wait for the breaker instead; those
  // that failed the outage's way are not held against their payload.
  // So do the payloads parked on suspicion of this outage.
  for (std::uint64_t ref : schedule_.take_delayed_and_parked()) {
    uncharge_failures(tracked_.at(ref), breaker_.dominant_fingerprint());
    schedule_.hold(ref);
    note_wait(tracked_.at(ref), 0, true);
  }
  out_.on_notice(describe_outage());
  // And those already judged poison the outage's way, before anyone knew.
  take_back_outage_verdicts();
  // A payload that succeeded earlier answers "outage or burst?" in one task
  // (unless one just failed: that was the answer).
  if (known_good_ && probe_at_once) breaker_.probe_now(now());
  // One payload's word is not enough to stop the run (a poison pill can
  // print any message): the next payload probes at once, and must fail for
  // a hidden file too (corroborate_hidden).
  if (!hidden_.empty()) breaker_.probe_now(now());
  report_pause(now(), nullptr);
}

std::string TaskFlow::hidden_path_once(const Tracked& t, const Outcome& outcome) {
  if (!settings_.hidden_path || hidden_path_claimed_.count(t.payload_id) > 0) return "";
  std::string hidden = settings_.hidden_path(outcome);
  if (!hidden.empty()) hidden_path_claimed_.insert(t.payload_id);
  return hidden;
}

void TaskFlow::corroborate_hidden(const Tracked& t, const Outcome& outcome) {
  if (hidden_.empty() || stop_at_next_turn_ || !settings_.hidden_path) return;
  if (hidden_path_claimed_.count(t.payload_id) > 0) return;  // the same payload again says nothing new
  if (settings_.hidden_path(outcome).empty()) return;
  hidden_path_claimed_.insert(t.payload_id);
  stop_at_next_turn_ = true;
}

void TaskFlow::uncharge_failures(Tracked& t, const std::string& fingerprint) {
  const std::size_t in_run = std::min<std::size_t>(t.attempts_in_run, t.history.size());
  for (auto a = t.history.end() - static_cast<long>(in_run); a != t.history.end(); ++a) {
    if (!a->finished || !a->charged || a->fingerprint != fingerprint) continue;
    a->charged = false;
    store_.add(UnchargeAttempt{t.task_id, a->n});
  }
}

void TaskFlow::quarantine_parked() {
  if (!schedule_.has_parked() || breaker_.open()) return;
  for (const auto& [fingerprint, d] : pending_) breaker_.set_deciding(fingerprint, false);
  pending_.clear();
  for (std::uint64_t ref : schedule_.take_parked_if([](std::uint64_t) { return true; })) {
    Tracked& t = tracked_.at(ref);
    quarantine(t, *t.last_failure, t.parked_reason);
  }
}

bool TaskFlow::waits_for_decision(const Outcome& outcome) {
  // Parked tasks keep their payloads in memory: past this many, a verdict
  // stands at once (at worst it is taken back if an outage is shown).
  constexpr std::size_t kMaxParked = 1024;
  if (!settings_.breaker.enabled) return false;
  if (breaker_.verified(outcome.fingerprint)) {
    // Shown to be the payloads' own, its verdicts stand at once; unless its
    // failures now fill the window as an outage's would: decided again.
    if (!breaker_.fills_window(outcome.fingerprint)) return false;
    breaker_.unverify(outcome.fingerprint);
  }
  if (schedule_.parked().size() >= kMaxParked) return false;
  auto it = pending_.find(outcome.fingerprint);
  if (it == pending_.end()) {
    // Payloads worked, but none small enough to keep for a check: nothing
    // can decide, so the verdict stands at once (taken back if an outage shows).
    if (!known_good_ && any_success_) return false;
    // With a payload known to work, a failure no other payload shares is a
    // poison pill; with none yet, nothing tells an outage's first failure
    // from poison, so it waits for the first success.
    if (known_good_ && breaker_.failed_with(outcome.fingerprint) < 2) return false;
    it = pending_.emplace(outcome.fingerprint, PendingDecision{}).first;
  }
  ++it->second.parked;
  it->second.example = outcome;
  it->second.example.output.clear();
  return true;
}

std::uint64_t TaskFlow::start_copy(const Task& of, bool check, const std::string& recheck_of) {
  const std::uint64_t ref = ++next_ref_;
  Tracked t;
  t.task = of;
  t.task.ref = ref;
  t.task.probe_copy = true;
  t.probe_copy = true;
  t.check = check;
  t.recheck_of = recheck_of;
  tracked_.emplace(ref, std::move(t));
  schedule_.make_ready(ref);
  return ref;
}

void TaskFlow::check_before_opening(const std::string& fingerprint) {
  // Deciding: the window does not ask again while the check runs; a check
  // already in flight answers for it too (the handler served, or not, just now).
  breaker_.set_deciding(fingerprint, true);
  window_checks_.insert(fingerprint);
  start_check_if_due();
}

void TaskFlow::start_check_if_due() {
  if (check_ref_ != 0 || !known_good_ || breaker_.open()) return;
  bool due = !window_checks_.empty();
  for (const auto& [fingerprint, d] : pending_) {
    if (d.rechecking) continue;
    breaker_.set_deciding(fingerprint, true);
    due = true;
  }
  if (!due) return;
  checked_with_ = known_good_->key;
  check_ref_ = start_copy(*known_good_, /*check=*/true, "");
}

void TaskFlow::on_check_outcome(Tracked& t, const Outcome& outcome) {
  check_ref_ = 0;
  tracked_.erase(t.task.ref);  // `t` is gone
  if (breaker_.open() || (pending_.empty() && window_checks_.empty())) return;
  if (outcome.kind != Kind::kOk) {
    // A payload that worked earlier in this run fails now: the handler is
    // down, and the parked failures (or those filling the window) are the
    // outage's. Its face: the check's own fingerprint.
    auto face = pending_.find(outcome.fingerprint);
    if (face == pending_.end() && window_checks_.count(outcome.fingerprint) == 0) {
      // The known-good payload fails its own way, not the parked ones':
      // it proves nothing about them, and is no longer known to work. The
      // next success checks again; meanwhile the window may open the
      // breaker with their fingerprint.
      for (const auto& [fingerprint, d] : pending_) breaker_.set_deciding(fingerprint, false);
      for (const std::string& fingerprint : std::exchange(window_checks_, {})) breaker_.set_deciding(fingerprint, false);
      known_good_.reset();
      return;
    }
    const Outcome example = face != pending_.end() ? face->second.example : outcome;
    out_.on_notice(checked_with_ + ", which succeeded earlier in this run, fails now (" +
                   std::string(to_string(outcome.kind)) + (outcome.fingerprint.empty() ? "" : " " + outcome.fingerprint) +
                   "): the handler is down, not the payloads");
    breaker_.open_for(outcome.fingerprint, now());
    hidden_.clear();
    on_breaker_opened(example, /*probe_at_once=*/false);
    return;
  }
  // The handler works now: a window filled by one fingerprint is bad
  // inputs together (their retries and verdicts go on as judged), not an
  // outage for a window's worth of outcomes.
  for (const std::string& fingerprint : std::exchange(window_checks_, {})) {
    breaker_.passed_check(fingerprint);
    if (pending_.count(fingerprint) == 0) breaker_.set_deciding(fingerprint, false);  // else its decision's
  }
  // Each decision still waiting: a recheck of two
  // of its payloads (one when it has one), or, for a failure only one
  // payload had (while nothing was known to work), its verdict as it
  // stands (`lone`).
  constexpr std::size_t kRechecks = 2;
  std::vector<std::string> lone;
  for (auto& [fingerprint, d] : pending_) {
    if (d.rechecking) continue;
    // Payloads a recheck released once go by the check alone when they fail
    // again (flaky ones must not go round for ever); a parked task never
    // released is rechecked, so that a recurring outage is told again.
    bool fresh = false;
    for (std::uint64_t ref : schedule_.parked()) {
      const Tracked& p = tracked_.at(ref);
      if (p.last_failure->fingerprint == fingerprint && !p.released) fresh = true;
    }
    if ((d.parked < 2 && breaker_.failed_with(fingerprint) < 2) || !fresh) {
      lone.push_back(fingerprint);
      continue;
    }
    std::set<std::string> payloads;
    std::vector<Task> copies;
    for (std::uint64_t ref : schedule_.parked()) {
      const Tracked& p = tracked_.at(ref);
      if (p.last_failure->fingerprint != fingerprint || p.released) continue;
      if (!payloads.insert(p.payload_id).second) continue;
      copies.push_back(p.task);
      if (copies.size() == kRechecks) break;
    }
    d.rechecking = true;
    for (const Task& of : copies) d.rechecks.insert(start_copy(of, /*check=*/false, fingerprint));
  }
  for (const std::string& fingerprint : lone) decide(fingerprint, /*poison=*/true, /*verify=*/false);
}

void TaskFlow::on_recheck_outcome(Tracked& t, const Outcome& outcome) {
  const std::string fingerprint = t.recheck_of;
  const std::string key = t.task.key;
  const std::uint64_t ref = t.task.ref;
  tracked_.erase(ref);  // `t` is gone
  auto it = pending_.find(fingerprint);
  // Not found: the breaker opened meanwhile (its call), or another recheck
  // of this decision released it already.
  if (it == pending_.end() || it->second.rechecks.erase(ref) == 0) return;
  PendingDecision& d = it->second;
  const std::size_t parked = d.parked;
  const std::string tasks = std::to_string(parked) + (parked == 1 ? " payload" : " payloads");
  if (outcome.kind != Kind::kOk && outcome.fingerprint == fingerprint) {
    d.failed_alike.push_back(key);
    if (!d.rechecks.empty()) return;  // the other recheck decides too
    const Outcome& e = d.example;
    std::string again = d.failed_alike[0];
    for (std::size_t i = 1; i < d.failed_alike.size(); ++i) again += " and " + d.failed_alike[i];
    ++report_.verified_bursts;
    out_.on_notice("not an outage: " + std::to_string(parked) + " payloads failed alike (" + fingerprint + ", " +
                   std::string(to_string(e.kind)) + (e.message.empty() ? "" : ": " + e.message.substr(0, e.message.find('\n'))) +
                   "), and while " + checked_with_ + ", which succeeded earlier in this run, succeeds again, " + again +
                   (d.failed_alike.size() == 1 ? " fails" : " fail") +
                   " that way again: the failure is the payloads' own (bad inputs together), quarantining " +
                   (parked == 1 ? "it" : "them"));
    decide(fingerprint, /*poison=*/true, /*verify=*/true);
    return;
  }
  ++report_.released_bursts;
  out_.on_notice(key + ", which failed with " + fingerprint + ", now " +
                 (outcome.kind == Kind::kOk ? std::string("succeeds") : "ends " + std::string(to_string(outcome.kind))) +
                 ": those failures were not the payloads' (an outage that ended?); " + tasks + " run again");
  decide(fingerprint, /*poison=*/false, /*verify=*/false);
}

void TaskFlow::decide(const std::string& fingerprint, bool poison, bool verify) {
  pending_.erase(fingerprint);
  breaker_.set_deciding(fingerprint, false);
  if (verify) breaker_.verify(fingerprint);
  const auto refs = schedule_.take_parked_if(
      [&](std::uint64_t ref) { return tracked_.at(ref).last_failure->fingerprint == fingerprint; });
  const auto now = this->now();
  for (std::uint64_t ref : refs) {
    Tracked& t = tracked_.at(ref);
    if (poison) {
      t.convicted = verify;
      quarantine(t, *t.last_failure, t.parked_reason);
    } else {
      uncharge_failures(t, fingerprint);
      t.released = true;
      schedule_.delay(ref, now);
    }
  }
}

void TaskFlow::drop_decisions() {
  for (const auto& [fingerprint, d] : pending_) breaker_.set_deciding(fingerprint, false);
  pending_.clear();
  for (const std::string& fingerprint : std::exchange(window_checks_, {})) breaker_.set_deciding(fingerprint, false);
  // The check in flight becomes the breaker's known-good probe; a recheck's
  // answer no longer counts (on_recheck_outcome finds no decision).
  if (check_ref_ != 0) {
    tracked_.at(check_ref_).check = false;
    breaker_.probe_started();
    check_ref_ = 0;
  }
}

Outcome TaskFlow::outage_example(const Outcome& outcome) const {
  const std::string& fingerprint = breaker_.dominant_fingerprint();
  if (outcome.fingerprint == fingerprint) return outcome;
  if (auto it = pending_.find(fingerprint); it != pending_.end()) return it->second.example;
  for (const auto& [ref, t] : tracked_) {
    if (t.last_failure && t.last_failure->fingerprint == fingerprint) return *t.last_failure;
  }
  for (auto it = judged_poison_.rbegin(); it != judged_poison_.rend(); ++it) {
    if (it->outcome.fingerprint == fingerprint) return it->outcome;
  }
  return Outcome{};  // none known: the message names the fingerprint only
}

std::string TaskFlow::describe_outage() const {
  const Outcome& o = outage_example_;
  if (!hidden_.empty()) {
    return "handler outage suspected: " + why_hidden(hidden_, o) + "; not the payloads' fault, not quarantining; " +
           (known_good_ ? "probing at once with " + known_good_->key + ", which succeeded earlier in this run"
                        : std::string("probing at once with the next payload")) +
           "; if it fails for a hidden file too, stopping (nothing can show tasks a file while a run lasts)" +
           share_hint();
  }
  std::string line = "handler outage suspected: " + std::to_string(breaker_.failures_when_opened()) + " of the last " +
                     std::to_string(settings_.breaker.window) + " distinct payloads failed, most with " +
                     breaker_.dominant_fingerprint();
  // The example is one of that fingerprint's own failures (outage_example),
  // never another group's kind and message.
  if (o.fingerprint == breaker_.dominant_fingerprint()) {
    line += " (" + std::string(to_string(o.kind));
    if (!o.message.empty()) line += ": " + o.message.substr(0, o.message.find('\n'));
    line += ")";
  }
  line += "; intake paused, not quarantining; ";
  if (known_good_) {
    line += "probing now with " + known_good_->key + ", which succeeded earlier in this run";
  } else {
    line += "probing one task every " + std::to_string(settings_.breaker.probe_interval.count()) + " ms";
  }
  if (settings_.breaker.max_wait.count() > 0) {
    line += "; stopping after " + std::to_string(settings_.breaker.max_wait.count() / 1000) +
            " s without a success (--breaker-max-wait)";
  }
  return line;
}

void TaskFlow::release_held() {
  const auto now = this->now();
  out_.on_notice("handler outage over (the handler works again): a task succeeded; " + std::to_string(schedule_.held_count()) +
                 " held tasks run again");
  out_.on_status("");
  for (std::uint64_t ref : schedule_.take_held()) schedule_.delay(ref, now);
}

void TaskFlow::remember_poison(const Tracked& t, std::int64_t record_id, const Outcome& outcome) {
  // Enough for the payloads judged just before an outage opens the breaker
  // (a window's worth, many times over); older verdicts stand.
  constexpr std::size_t kRemembered = 256;
  // Without a store the payload exists nowhere else; with one it is reread
  // from the store if the verdict is taken back.
  constexpr std::size_t kMaxKeptPayload = 1 << 20;
  if (!can_.takes_back) return;  // nothing to remember: a verdict given stands
  if (record_id == 0 && t.task.payload.size() > kMaxKeptPayload) return;
  JudgedPoison p{t, record_id, outcome};
  p.outcome.output.clear();
  if (record_id != 0) p.task.task.payload.clear();
  judged_poison_.push_back(std::move(p));
  while (judged_poison_.size() > kRemembered) judged_poison_.pop_front();
}

void TaskFlow::take_back_outage_verdicts() {
  const std::string& fingerprint = breaker_.dominant_fingerprint();
  std::vector<std::string> taken;
  for (auto it = judged_poison_.begin(); it != judged_poison_.end();) {
    if (it->outcome.fingerprint != fingerprint || active_payloads_.count(it->task.payload_id) > 0 ||
        it->task.convicted) {
      ++it;
      continue;
    }
    Tracked t = std::move(it->task);
    const std::int64_t record_id = it->record_id;
    t.last_failure = std::move(it->outcome);
    it = judged_poison_.erase(it);
    if (record_id != 0) {
      auto payload = store_.record_payload(t.sha256);
      if (!payload) {
        out_.on_notice("cannot take back quarantine record #" + std::to_string(record_id) + ": " + payload.error());
        continue;
      }
      t.task.payload = std::move(*payload);
      const std::string detail = "released: quarantined earlier in this run with " + fingerprint +
                                 ", the fingerprint of a suspected handler outage; the task runs again";
      store_.add(TakeBackRecord{record_id, t.task_id, detail});
      taken.push_back("#" + std::to_string(record_id) + " (" + t.task.key + ")");
    } else {
      taken.push_back(t.task.key);
    }
    out_.on_taken_back(t.task, *t.last_failure,
                       "a suspected handler outage fails payloads with " + fingerprint + "; held, it runs again",
                       record_id);
    uncharge_failures(t, breaker_.dominant_fingerprint());
    note_wait(t, 0, true);
    const std::uint64_t ref = ++next_ref_;
    t.task.ref = ref;
    active_payloads_.insert(t.payload_id);
    tracked_.emplace(ref, std::move(t));
    schedule_.hold(ref);
    ++report_.taken_back;
    if (report_.quarantined > 0) --report_.quarantined;
  }
  if (taken.empty()) return;
  std::string list;
  for (std::size_t i = 0; i < taken.size() && i < 10; ++i) list += (i ? ", " : "") + taken[i];
  if (taken.size() > 10) list += ", and " + std::to_string(taken.size() - 10) + " more";
  out_.on_notice("took back " + std::to_string(taken.size()) + " poison verdict" + (taken.size() == 1 ? "" : "s") +
                 " of this run with the outage's fingerprint: " + list + "; held, they run again");
}

void TaskFlow::remember_good(const Tracked& t) {
  // Small payloads only: a copy per successful task must cost next to nothing.
  constexpr std::size_t kMaxKnownGood = 64 * 1024;
  if (t.probe_copy || t.task.payload.size() > kMaxKnownGood) return;
  if (!known_good_) known_good_.emplace();
  known_good_->key = t.task.key;
  known_good_->payload = t.task.payload;
}

Status TaskFlow::start_probe(std::vector<std::uint64_t>& starts, Clock::time_point now) {
  if (!known_good_) {
    // Nothing is known to work yet: the next fresh payload is the probe.
    if (auto s = take_fresh(1, starts); !s) return s;
    if (!starts.empty()) {
      tracked_.at(starts.front()).probe = true;
      breaker_.probe_started();
    }
    return Status::ok();
  }
  // A copy of a settled task: no ledger attempt (its task is done), no
  // verdict, not in active_payloads_ (the same input may still come).
  start_copy(*known_good_, /*check=*/false, "");
  breaker_.probe_started();
  report_pause(now, nullptr);
  return Status::ok();
}

void TaskFlow::on_probe_copy_outcome(Tracked& t, const Outcome& outcome) {
  const auto now = this->now();
  const bool ok = outcome.kind == Kind::kOk;
  const std::string fingerprint = breaker_.dominant_fingerprint();
  const std::string key = t.task.key;
  const bool was_open = breaker_.open();
  const bool verified = breaker_.probe_ended(ok, now, /*known_good=*/true);
  tracked_.erase(t.task.ref);  // the probe is done; `t` is gone
  if (!was_open) return;
  if (ok && verified) {
    ++report_.verified_bursts;
    out_.on_notice("not an outage: " + key + ", which succeeded earlier in this run, succeeds again while payloads "
                   "keep failing with " + fingerprint + ": those failures are the payloads' own (a burst of poison) "
                   "and count against them from now on");
  }
  if (ok) {
    if (!verified) {
      out_.on_notice("the handler works: " + key + ", which succeeded earlier in this run, succeeds again");
    }
    release_held();
    return;
  }
  if (!hidden_.empty() && settings_.hidden_path && !settings_.hidden_path(outcome).empty()) {
    stop_at_next_turn_ = true;  // a payload that worked before now fails for a hidden file too
    return;
  }
  report_pause(now, &outcome);
}

void TaskFlow::report_pause(Clock::time_point now, const Outcome* failed_probe) {
  if (!breaker_.open()) return;
  const auto open_for = std::chrono::duration_cast<std::chrono::seconds>(now - breaker_.opened_at()).count();
  std::string status = "paused: handler outage suspected for " + std::to_string(open_for) + " s, " +
                       std::to_string(schedule_.held_count()) + " held";
  const auto wall = [now](Clock::time_point when) {
    const auto at = std::chrono::system_clock::now() + std::chrono::duration_cast<std::chrono::system_clock::duration>(when - now);
    const std::time_t t = std::chrono::system_clock::to_time_t(at);
    std::tm tm{};
    ::localtime_r(&t, &tm);
    char buf[16];
    std::strftime(buf, sizeof buf, "%H:%M:%S", &tm);
    return std::string(buf);
  };
  if (const auto next = breaker_.next_probe_at()) {
    status += ", next probe at " + wall(std::max(*next, now));
  } else {
    status += ", probe running";
  }
  if (settings_.breaker.max_wait.count() > 0) {
    status += ", stopping at " + wall(breaker_.opened_at() + settings_.breaker.max_wait) + " (--breaker-max-wait)";
  }
  out_.on_status(status);
  // A log line when a probe failed: the first, then one every 10 s at most.
  if (failed_probe == nullptr) return;
  if (last_pause_notice_ != Clock::time_point{} && now - last_pause_notice_ < std::chrono::seconds(10)) return;
  last_pause_notice_ = now;
  out_.on_notice(status + "; the last probe failed: " + std::string(to_string(failed_probe->kind)) + " " +
                 failed_probe->fingerprint);
}

void TaskFlow::stop_for_outage() {
  report_.stopped_by_breaker = true;
  report_.stopped_for_hidden = hidden_;
  inner_done_ = true;
  const std::string why = hidden_.empty() ? "handler outage suspected for longer than " +
                                                std::to_string(settings_.breaker.max_wait.count() / 1000) +
                                                " s (--breaker-max-wait)"
                                          : "tasks cannot see " + hidden_ + ", which this host has";
  out_.on_notice(why + ": stopping; " + std::to_string(schedule_.held_count()) +
                 " held tasks (listed as held) and the inputs not read yet run in the next run over the same inputs "
                 "and store" + share_hint());
  out_.on_status("");
}

void TaskFlow::give_back_held() {
  const std::vector<std::uint64_t> held = schedule_.take_held();
  if (held.empty()) return;
  out_.on_notice("handler outage suspected for longer than --breaker-max-wait: " + std::to_string(held.size()) +
                 " held tasks given back to the other workers; probing goes on here");
  for (std::uint64_t ref : held) {
    give_back(ref, "held by a suspected handler outage longer than --breaker-max-wait: given back to the other workers");
  }
}

void TaskFlow::give_back(std::uint64_t ref, const std::string& why) {
  Tracked& t = tracked_.at(ref);
  ++report_.held;
  schedule_.remove(ref);
  if (t.task_id != 0) store_.add(ReleaseTask{t.task_id});
  out_.on_verdict(t.task, t.last_failure.value_or(Outcome{}), verdict_of(Verdict::Type::kHeld, t.attempts, why));
  forget(ref);
}

void TaskFlow::wind_down() {
  winding_down_ = true;
  inner_done_ = true;
  inner_waiting_ = false;
  // A decision waiting for its check decides nothing now: its parked tasks
  // are given back with the rest.
  drop_decisions();
}

void TaskFlow::give_back_waiting(const std::string& why) {
  std::vector<std::uint64_t> waiting;
  for (const auto& [ref, t] : tracked_) {
    // What runs or starts finishes first; a verdict told once the back end
    // answers stands.
    if (t.running || starting_.count(ref) > 0 || awaiting_answer_.count(ref) > 0) continue;
    waiting.push_back(ref);
  }
  for (std::uint64_t ref : waiting) {
    if (tracked_.at(ref).probe_copy) {
      schedule_.remove(ref);  // a copy not yet handed out: not run
      forget(ref);
      continue;
    }
    give_back(ref, why);
  }
}

void TaskFlow::stop_for_setup(const Outcome& example) {
  std::string what = std::string(to_string(example.kind));
  if (!example.message.empty()) what += ": " + example.message.substr(0, example.message.find('\n'));
  report_.stopped_for_setup = "every task so far (" + std::to_string(unread_failures_.size()) +
                              ") failed without reading its payload, so the command fails on its own setup, not "
                              "on its inputs (" + what + ")";
  hold_reason_ = "held: the command fails without reading its payload; runs again in the next run over the same store";
  inner_done_ = true;
  // Decisions waiting (a check in flight) decide nothing any more: their
  // parked tasks are held with the rest.
  drop_decisions();
  // Retries waiting for their backoff would fail the same way: held.
  for (std::uint64_t ref : schedule_.take_delayed_and_parked()) {
    schedule_.hold(ref);
    note_wait(tracked_.at(ref), 0, true);
  }
  out_.on_notice(report_.stopped_for_setup + ": stopping; nothing was quarantined or charged; fix the command, and a "
                 "run over the same inputs and store runs them all");
  out_.on_status("");
}

std::string TaskFlow::share_hint() const {
  if (hidden_.empty()) return "";
  const std::string dir = share_for(hidden_);
  if (dir.empty()) return "";
  return "; to let tasks read it, run with --share " + dir + " (or --writable " + dir + " to let them write there)";
}

Status TaskFlow::finish(const std::string& run_error) {
  // Attempts started in this run that never got an outcome (a signal or a
  // store error ended the run, or the task never left the ready queue):
  // recorded as interrupted and not charged, so that they do not read as
  // "the supervisor died during it" next time.
  if (report_.stop_signal == 0) report_.stop_signal = stop_signal();
  const std::string why = report_.stop_signal == SIGINT    ? "pillbox was interrupted (SIGINT)"
                          : report_.stop_signal == SIGTERM ? "pillbox was stopped (SIGTERM)"
                                                           : "pillbox stopped early: " +
                                                                 (fatal_.is_ok() ? run_error : fatal_.message());
  for (auto& [ref, t] : tracked_) {
    if (t.attempts_in_run == 0 || t.history.empty() || t.history.back().finished) continue;
    if (t.lost) continue;  // its attempt is its new holder's to end
    store::AttemptSummary& a = t.history.back();
    a.finished = true;
    a.kind = "interrupted";
    a.charged = false;
    ++report_.interrupted;
    OutcomeRecord interrupted;
    interrupted.kind = "interrupted";
    interrupted.message = why;
    store_.add(EndAttempt{t.task_id, a.n, std::move(interrupted), false, false, ""});
  }
  for (std::uint64_t ref : schedule_.take_held()) {
    auto it = tracked_.find(ref);
    if (it == tracked_.end()) continue;
    ++report_.held;
    Outcome o = it->second.last_failure.value_or(Outcome{});
    out_.on_verdict(it->second.task, o,
                    verdict_of(Verdict::Type::kHeld, it->second.attempts, hold_reason_));
  }
  // What this run still claims (retries waiting, held tasks, attempts cut
  // short) is free for the next run.
  store_.add(ReleaseClaims{});
  if (!fatal_.is_ok()) {
    // The store failed: try once more to record what is known, then report the failure.
    const Status failure = fatal_;
    fatal_ = Status::ok();
    (void)flush({}, /*release_held=*/true);
    return failure;
  }
  return flush({}, /*release_held=*/true);
}

}  // namespace pillbox
