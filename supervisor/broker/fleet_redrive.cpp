#include "supervisor/broker/fleet_redrive.h"

#include <algorithm>
#include <map>
#include <optional>
#include <set>
#include <thread>

#include "supervisor/broker/fleet_allowance.h"
#include "supervisor/exec/stop_signals.h"
#include "supervisor/io/terminal_text.h"
#include "supervisor/ops/replay_tally.h"

namespace pillbox::broker {
namespace {

using Clock = ReplayTally::Clock;

// The longest single wait for outcomes (or paced sleep): short enough that
// SIGINT/SIGTERM, which a blocking read of a broker's client does not let
// interrupt it, stop the wait within a second.
constexpr std::chrono::milliseconds kLongestBlock{1000};
// How often the locks of the records in flight are renewed (Redis's lease
// is 20 s: redis_redrive.cpp).
constexpr std::chrono::milliseconds kRenewEvery{5'000};

// Whether the outcome of the redrive `entry` is in the record's state
// already: recorded by the replay that made it, or by a later one that found
// it (Redriver::adopt_earlier_outcomes), never twice.
bool already_recorded(const FleetState& s, const std::string& entry) {
  return std::any_of(s.redrives.begin(), s.redrives.end(), [&](const FleetAttempt& a) { return a.entry == entry; });
}

// One redrive in flight.
struct Flight {
  FleetRecord record;
  std::string entry;  // the redrive's entry
  // Made by an earlier replay that did not record how it ended (it died, or
  // gave up waiting): its outcome found afterwards.
  bool earlier = false;
  std::int64_t revision = 0;  // the revision it put back (a patch), 0: the original
};

class Redriver {
 public:
  Redriver(RedriveRoute& route, const ReplayRun& run) : route_(route), run_(run), tally_(run, result_, run.on_progress) {}

  Expected<ReplayResult> run(std::vector<FleetRecord> plan);

 private:
  // Records of `plan` an earlier replay redrove without recording how that
  // ended (it died, or gave up waiting), whose redrive a worker has settled
  // since: the outcome is recorded, and the record leaves the plan (never
  // redriven a second time for one failure).
  Status adopt_earlier_outcomes(std::vector<FleetRecord>& plan);
  // Renews the locks of `flights` once kRenewEvery has passed since the last time.
  Status renew_locks(const std::map<std::string, Flight>& flights);
  // Blocks until every flight of `flights` has its outcome, the batch times
  // out, or a stop signal; returns how many of them failed again.
  Expected<std::size_t> wait(std::map<std::string, Flight>& flights);
  Status finish(Flight& flight, const RedriveOutcome& outcome);

  RedriveRoute& route_;
  const ReplayRun& run_;
  StopSignals stop_signals_;
  ReplayResult result_;
  ReplayTally tally_;
  Clock::time_point next_renewal_ = Clock::now() + kRenewEvery;
};

Status Redriver::renew_locks(const std::map<std::string, Flight>& flights) {
  if (flights.empty() || Clock::now() < next_renewal_) return Status::ok();
  next_renewal_ = Clock::now() + kRenewEvery;
  std::vector<std::string> ids;
  for (const auto& [entry, f] : flights) ids.push_back(f.record.id);
  return route_.renew(ids);
}

Status Redriver::adopt_earlier_outcomes(std::vector<FleetRecord>& plan) {
  auto found = route_.earlier_outcomes(plan, result_.notices);
  if (!found) return Status::error(found.error(), found.error_code());
  if (found->empty()) return Status::ok();
  std::vector<bool> adopted(plan.size(), false);
  for (std::size_t i = 0; i < plan.size(); ++i) {
    auto it = found->find(plan[i].state.waiting_entry);
    if (plan[i].state.waiting_entry.empty() || it == found->end()) continue;
    Flight flight{plan[i], it->first, true, plan[i].state.waiting_revision};
    if (auto s = finish(flight, it->second); !s) return s;
    adopted[i] = true;
  }
  // A new list, not a compaction in place: moving a record onto itself
  // empties it (libstdc++), and an empty record was redriven as key "",
  // payload "" (found by an attack review).
  std::vector<FleetRecord> rest;
  rest.reserve(plan.size());
  for (std::size_t i = 0; i < plan.size(); ++i) {
    if (!adopted[i]) rest.push_back(std::move(plan[i]));
  }
  plan = std::move(rest);
  return Status::ok();
}

Status Redriver::finish(Flight& flight, const RedriveOutcome& outcome) {
  const Outcome& o = outcome.outcome;
  const store::ReplayVerdict verdict = outcome.verdict;
  const std::string kind(to_string(o.kind));
  const std::string earlier =
      flight.earlier ? "; redriven by an earlier replay that did not record how it ended, found in " +
                           (verdict == store::ReplayVerdict::kResolved ? route_.results_name() : route_.dlq_name())
                     : "";
  // As the store's replay says it: which revision ran.
  const std::string patched = flight.revision > 0 ? ", from revision " + std::to_string(flight.revision) +
                                                        " (a patch; the original is unchanged)"
                                                  : "";
  const std::string detail =
      verdict == store::ReplayVerdict::kResolved
          ? "resolved: ok on worker " + outcome.worker + " (entry " + flight.entry + ", result " + outcome.outcome_entry +
                earlier + ")" + patched
          : "failed again: " + kind + (o.fingerprint.empty() ? "" : " " + o.fingerprint) + " on worker " +
                outcome.worker + " (entry " + flight.entry + ", dead letter " + outcome.outcome_entry + earlier + ")" +
                patched;
  bool recorded_before = false;
  auto changed = route_.dead_letters().change_state(flight.record.id, false, [&](FleetState& s, const FleetRecord&) {
    recorded_before = already_recorded(s, flight.entry);
    if (recorded_before) return Status::ok();  // written as it was: no change
    s.status = store::status_after(verdict);
    s.updated_at = store::now_ms();
    if (s.waiting_entry == flight.entry) {
      s.waiting_entry.clear();
      s.waiting_revision = 0;
    }
    s.redrives.push_back({.worker = outcome.worker, .ended_at = s.updated_at, .kind = kind,
                          .fingerprint = o.fingerprint, .message = o.message,
                          .charged = verdict == store::ReplayVerdict::kFailedAgain, .entry = flight.entry,
                          .outcome_entry = outcome.outcome_entry, .revision = flight.revision});
    s.audit.push_back({s.updated_at, run_.actor, "replayed", detail});
    return Status::ok();
  });
  if (!changed) return Status::error(changed.error(), changed.error_code());
  if (!flight.earlier) {
    if (auto s = route_.unlock(flight.record.id); !s) return s;
  }
  if (recorded_before) {
    result_.notices.push_back("record " + flight.record.id + ": the outcome of its redrive " + flight.entry +
                              " was recorded by another replay meanwhile");
    return Status::ok();
  }
  flight.record = std::move(*changed);
  if (!flight.earlier) apply_state(flight.record, flight.record.state, "");  // its lock is gone now
  if (flight.earlier) ++result_.earlier_outcomes;
  if (run_.on_result) {
    const nlohmann::json id = flight.record.id;
    run_.on_result(ReplayedRecord{id, flight.record.record, o, verdict, flight.revision, outcome.output_omitted, ""});
  }
  tally_.count(verdict, o);
  return Status::ok();
}

Expected<std::size_t> Redriver::wait(std::map<std::string, Flight>& flights) {
  const auto deadline = Clock::now() + run_.batch_timeout;
  std::size_t failed = 0;
  std::map<std::string, std::string> waited_for;  // redrive entry -> record id
  for (const auto& [entry, f] : flights) waited_for.emplace(entry, f.record.id);
  while (!flights.empty()) {
    if (stop_signals_.caught() != 0) break;
    if (auto s = renew_locks(flights); !s) return Error{s.message(), s.code()};
    const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now());
    if (left.count() <= 0) break;
    auto found = route_.outcomes(waited_for, std::min(left, kLongestBlock));
    if (!found) return Error{found.error(), found.error_code()};
    for (const RedriveOutcome& o : *found) {
      auto it = flights.find(o.entry);
      if (it == flights.end()) continue;  // found twice in one read: recorded once
      if (o.verdict == store::ReplayVerdict::kFailedAgain) ++failed;
      if (auto st = finish(it->second, o); !st) return Error{st.message(), st.code()};
      flights.erase(it);
      waited_for.erase(o.entry);
    }
  }
  return failed;
}

Expected<ReplayResult> Redriver::run(std::vector<FleetRecord> plan) {
  result_.selected = plan.size();
  if (auto s = adopt_earlier_outcomes(plan); !s) return Error{s.message(), s.code()};
  std::size_t next = 0, batch_no = 0;
  while (next < plan.size() && result_.stopped_because.empty()) {
    // Reached with the outcomes of an earlier replay's redrives alone.
    result_.stopped_because = tally_.stop_after_reason();
    if (!result_.stopped_because.empty()) break;
    const std::size_t size = std::min({tally_.batch_size(), plan.size() - next, tally_.room()});
    ++batch_no;
    if (auto s = route_.mark(); !s) return Error{s.message(), s.code()};
    std::map<std::string, Flight> flights;  // by the redrive's entry
    for (std::size_t i = 0; i < size && next < plan.size(); ++i, ++next) {
      // Paced: a start waits for its turn, not for anything that happens;
      // in steps, so that SIGINT/SIGTERM (which a sleep outlasts) stop it.
      std::optional<Clock::time_point> turn;
      while ((turn = tally_.not_before()) && stop_signals_.caught() == 0) {
        if (auto s = renew_locks(flights); !s) return Error{s.message(), s.code()};
        std::this_thread::sleep_for(std::min<Clock::duration>(*turn - Clock::now(), kLongestBlock));
      }
      if (stop_signals_.caught() != 0) break;
      tally_.take_turn();
      if (plan[next].payload_omitted) {  // left out of the plan's listing: read now, checked as any
        auto whole = route_.dead_letters().get(plan[next].id);
        if (!whole) return Error{whole.error(), whole.error_code()};
        plan[next] = std::move(*whole);
      }
      // Its newest revision, when it was patched: checked before it is claimed.
      auto what = redrive_payload(route_.dead_letters(), plan[next], run_.trust_unsigned);
      if (!what) {
        if (what.error_code() != ErrorCode::kUsage) return Error{what.error(), what.error_code()};
        result_.skipped.push_back(what.error());
        continue;
      }
      auto entry = route_.start(plan[next], *what, batch_no, result_);
      if (!entry) return Error{entry.error(), entry.error_code()};
      if (entry->empty()) continue;
      flights.emplace(*entry, Flight{std::move(plan[next]), *entry, false, what->revision});
    }
    const std::size_t started = flights.size();
    auto failed = wait(flights);
    if (!failed) return Error{failed.error(), failed.error_code()};
    const std::size_t ran = started - flights.size();
    std::string ids;
    for (const auto& [entry, f] : flights) ids += (ids.empty() ? "" : ", ") + f.record.id;
    const std::string left = "record" + std::string(flights.size() == 1 ? " " : "s ") + ids +
                             " (their redrives stay on " + route_.work_name() +
                             ", and the records are not redriven again until a worker settles them";
    if (const int sig = stop_signals_.caught(); sig != 0) {
      result_.stop_signal = sig;
      result_.stopped_because = std::string("stopped by ") + stop_signal_name(sig);
      if (!flights.empty()) result_.stopped_because += "; no outcome yet for " + left + ")";
    } else if (!flights.empty()) {
      result_.stopped_because = "no outcome within --batch-timeout " + std::to_string(run_.batch_timeout.count()) +
                                " ms for " + left + "; " + route_.no_outcome_hint() + ")";
    } else {
      result_.stopped_because = tally_.stop_after_reason();
      if (result_.stopped_because.empty()) result_.stopped_because = tally_.failure_ratio_reason(*failed, ran);
    }
    // Nobody waits for these any more: their locks go, and their redrives,
    // still on the work queue, keep them from being redriven again (start()).
    for (const auto& [entry, f] : flights) {
      if (auto s = route_.unlock(f.record.id); !s) return Error{s.message(), s.code()};
    }
  }
  result_.not_replayed = result_.selected - result_.replayed;
  return std::move(result_);
}

}  // namespace

RedriveOutcome redrive_failed_again(const FleetRecord& dead, const std::string& entry) {
  RedriveOutcome o;
  o.outcome = pillbox::outcome_of(dead.record.entry);
  o.verdict = store::ReplayVerdict::kFailedAgain;
  o.entry = entry;
  o.outcome_entry = dead.id;
  if (!dead.attempts.empty() && !dead.attempts.back().worker.empty()) {
    o.worker = dead.attempts.back().worker;
  } else if (dead.broker.is_object() && dead.broker.contains("first_death_reason")) {
    o.worker = "none: dead-lettered by RabbitMQ itself (" +
               dead.broker.value("first_death_reason", std::string("no reason given")) + ")";
  } else {
    o.worker = "unknown";
  }
  return o;
}

std::string patched_since(const FleetState& state, const RedrivePayload& what, const std::string& id) {
  const FleetRevision* newest = newest_revision(state);
  if ((newest != nullptr ? newest->n : 0) == what.revision) return "";
  return "record " + id + " was patched while this replay started it (its newest revision is " +
         std::to_string(newest != nullptr ? newest->n : 0) + ", not " + std::to_string(what.revision) +
         "): not redriven; replay it again";
}

bool redrive_claimable(const FleetRecord& r, store::ReplayScope scope) {
  return !r.replaying && store::replayable(r.record.status, scope);
}

Status check_redrive_allowance(const FleetDeadLetters& dead_letters, const FleetRecord& r, const ReplayRun& run) {
  if (!run.allowed_only) return Status::ok();
  return check_allowance(r, allowance_signature(dead_letters, r), run.trust_unsigned);
}

Expected<std::vector<FleetRecord>> redrive_plan(FleetDeadLetters& dead_letters, const ReplayRun& run,
                                                std::vector<std::string>& skipped) {
  std::vector<FleetRecord> out;
  if (!run.ids.empty()) {
    std::set<std::string> seen;
    for (const auto& id : run.ids) {
      if (!seen.insert(id).second) continue;  // given twice: redriven once
      auto r = dead_letters.get(id);
      if (!r) return Error{r.error(), r.error_code()};
      if (!redrive_claimable(*r, run.scope())) {
        skipped.push_back(r->replaying ? "record " + id + " is being replayed right now by " + r->replaying_by +
                                             ": not redriven twice at once"
                                       : "record " + id + " " + not_replayable_why(r->record.status, run.scope(), id));
        continue;
      }
      if (auto ok = check_signed(*r, run.trust_unsigned); !ok) {
        skipped.push_back(ok.message());
        continue;
      }
      if (auto ok = check_newest_revision(dead_letters, *r, run.trust_unsigned); !ok) {
        skipped.push_back(ok.message());
        continue;
      }
      if (auto ok = check_redrive_allowance(dead_letters, *r, run); !ok) {
        skipped.push_back(ok.message());
        continue;
      }
      out.push_back(std::move(*r));
    }
    return out;
  }
  std::size_t not_open = 0;
  // Records left for what their signature, or their allowance, is: named,
  // with the first one's reason.
  struct Left {
    std::vector<std::string> ids;
    std::string first_why;
    void add(const FleetRecord& r, const Status& why) {
      if (first_why.empty()) first_why = why.message();
      ids.push_back(r.id);
    }
    void say(const std::string& what, std::vector<std::string>& skipped) const {
      if (ids.empty()) return;
      std::string named;
      for (std::size_t i = 0; i < ids.size() && i < 10; ++i) named += (i == 0 ? "" : ", ") + ids[i];
      if (ids.size() > 10) named += ", ...";
      skipped.push_back(std::to_string(ids.size()) + " matching records (" + named + ") " + what +
                        ", not redriven; the first: " + first_why);
    }
  } unsigned_records, unallowed_records, unsigned_revisions;
  auto s = dead_letters.each([&](const FleetRecord& r) {
    if (!fleet_matches(r, run.filter)) return true;
    if (!redrive_claimable(r, run.scope())) {
      ++not_open;
    } else if (auto ok = check_signed(r, run.trust_unsigned); !ok) {
      unsigned_records.add(r, ok);
    } else if (auto revision = check_newest_revision(dead_letters, r, run.trust_unsigned); !revision) {
      unsigned_revisions.add(r, revision);
    } else if (auto allowed = check_redrive_allowance(dead_letters, r, run); !allowed) {
      unallowed_records.add(r, allowed);
    } else {
      out.push_back(r);
    }
    return true;
  });
  if (!s) return Error{s.message(), s.code()};
  unsigned_records.say("have no valid signature", skipped);
  unsigned_revisions.say("have a newest revision with no valid signature", skipped);
  unallowed_records.say("have no valid allowance", skipped);
  if (not_open > 0) {
    // --force takes all but those another replay holds (redrive_claimable).
    skipped.push_back(std::to_string(not_open) + " matching records " +
                      (run.scope() == store::ReplayScope::kOpen
                           ? "are resolved, discarded or being replayed (--force replays them too, except those "
                             "being replayed)"
                           : store::not_replayable_words(run.scope())));
  }
  std::reverse(out.begin(), out.end());  // oldest first
  return out;
}

Expected<ReplayResult> redrive(RedriveRoute& route, const ReplayRun& run) {
  std::vector<std::string> skipped;
  auto plan = redrive_plan(route.dead_letters(), run, skipped);
  if (!plan) return Error{plan.error(), plan.error_code()};
  Redriver redriver(route, run);
  auto result = redriver.run(std::move(*plan));
  if (result) result->skipped.insert(result->skipped.begin(), skipped.begin(), skipped.end());
  return result;
}

}  // namespace pillbox::broker
