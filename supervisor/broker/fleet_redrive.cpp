#include "supervisor/broker/fleet_redrive.h"

#include <algorithm>
#include <map>
#include <optional>
#include <set>
#include <thread>

#include "supervisor/broker/stream_reply.h"
#include "supervisor/exec/stop_signals.h"
#include "supervisor/io/terminal_text.h"
#include "supervisor/ops/replay_tally.h"
#include "supervisor/store/replay_store.h"

namespace pillbox::broker {
namespace {

using Clock = ReplayTally::Clock;

// The longest single XREAD BLOCK (or paced sleep): below the connection's
// command timeout (RedisConnection::open, 5 s), and short enough that
// SIGINT/SIGTERM, which hiredis does not let interrupt a read, stop the wait
// within a second.
constexpr std::chrono::milliseconds kLongestBlock{1000};
// A redrive lock is a lease: it runs out this long after the replay last
// renewed it, which it does every kRenewEvery while it starts and waits. A
// replay that dies (SIGKILL) leaves its records "replaying" for at most a
// lease; one stopped for longer (SIGSTOP) may find a record redriven by the
// next replay meanwhile, which is why outcomes are recorded once per
// redrive entry (already_recorded), whoever finds them.
constexpr std::chrono::milliseconds kLockLease{20'000};
constexpr std::chrono::milliseconds kRenewEvery{5'000};
constexpr int kClaimRounds = 16;
// An earlier replay's outcomes are looked for in pages of this many entries.
constexpr int kScanPage = 1000;

// KEYS: NAME, NAME:dlq:state, the record's lock. ARGV: id, the state as it
// was read ('' = no field), the lock's value, its ms, key, payload, the
// earlier redrive still waiting ('' = none), the state to write, in which
// "waiting_entry":"?" stands for the entry added here.
// Returns {'added', entry} | {'changed'} | {'locked', holder} | {'waiting', entry}.
constexpr const char* kRedriveScript = R"lua(
local cur = redis.call('HGET', KEYS[2], ARGV[1])
if not cur then cur = '' end
if cur ~= ARGV[2] then return {'changed'} end
local holder = redis.call('GET', KEYS[3])
if holder then return {'locked', holder} end
if ARGV[7] ~= '' and #redis.call('XRANGE', KEYS[1], ARGV[7], ARGV[7]) > 0 then return {'waiting', ARGV[7]} end
redis.call('SET', KEYS[3], ARGV[3], 'NX', 'PX', ARGV[4])
local e = redis.call('XADD', KEYS[1], '*', 'key', ARGV[5], 'payload', ARGV[6], 'redrive_of', ARGV[1])
local state = string.gsub(ARGV[8], '"waiting_entry":"%?"', '"waiting_entry":"' .. e .. '"', 1)
redis.call('HSET', KEYS[2], ARGV[1], state)
return {'added', e}
)lua";

// KEYS: a lock. ARGV: its value. Deletes it only while it is still ours.
constexpr const char* kUnlockScript = R"lua(
if redis.call('GET', KEYS[1]) == ARGV[1] then return redis.call('DEL', KEYS[1]) end
return 0
)lua";

// KEYS: locks. ARGV: their value, the lease in ms. Renews those still ours.
constexpr const char* kRenewScript = R"lua(
local n = 0
for _, lock in ipairs(KEYS) do
  if redis.call('GET', lock) == ARGV[1] then redis.call('PEXPIRE', lock, ARGV[2]); n = n + 1 end
end
return n
)lua";

// Whether the outcome of the redrive `entry` is in the record's state
// already: recorded by the replay that made it, or by a later one that found
// it (Redriver::adopt_earlier_outcomes), never twice.
bool already_recorded(const FleetState& s, const std::string& entry) {
  return std::any_of(s.redrives.begin(), s.redrives.end(), [&](const FleetAttempt& a) { return a.entry == entry; });
}

// Never one being replayed, even with --force: its lock is another replay's.
bool claimable(const FleetRecord& r, bool force) { return !r.replaying && store::replayable(r.record.status, force); }

Error setup(std::string message) { return Error{std::move(message), ErrorCode::kSetup}; }

// The newest entry id of `key`, "0-0" when it has none: where a wait for
// what is added after now starts.
Expected<std::string> last_id(RedisConnection& redis, const std::string& key) {
  auto r = redis.command({"XREVRANGE", key, "+", "-", "COUNT", "1"});
  if (!r) return Error{r.error()};
  const redisReply* top = r->get();
  if (top->type != REDIS_REPLY_ARRAY || top->elements == 0) return std::string("0-0");
  const redisReply* e = top->element[0];
  if (e->type != REDIS_REPLY_ARRAY || e->elements != 2) return std::string("0-0");
  return reply_text(e->element[0]);
}

struct RedriveOutcome {
  Outcome outcome;
  std::string worker;         // the consumer that settled the redrive
  std::string entry;          // the redrive's entry in NAME
  std::string outcome_entry;  // its result in NAME:results, or its dead letter in NAME:dlq
  // Its output was not kept in NAME:results (larger than the worker's
  // --results-max-output): why, as the result says it; "" when it was.
  std::string output_omitted;
};

// One redrive in flight.
struct Flight {
  FleetRecord record;
  std::string entry;  // its entry in NAME
  // Made by an earlier replay that did not record how it ended (it died, or
  // gave up waiting): its outcome found afterwards in NAME:results/NAME:dlq.
  bool earlier = false;
};

// An outcome of a redrive in NAME:results or NAME:dlq. outcome_of gives one
// only for an `entry` of `wanted` (redrive entry -> record id) whose
// redrive_of names that record.
struct FoundOutcome {
  std::string entry;
  RedriveOutcome outcome;
  store::ReplayVerdict verdict = store::ReplayVerdict::kResolved;
};

std::optional<FoundOutcome> outcome_of(const std::string& id, const EntryFields& fields, bool is_dlq,
                                       const std::map<std::string, std::string>& wanted) {
  const std::string* entry = entry_field(fields, "entry");
  if (entry == nullptr) return std::nullopt;
  auto it = wanted.find(*entry);
  if (it == wanted.end()) return std::nullopt;  // another redrive's, or no redrive at all
  const std::string* of = entry_field(fields, "redrive_of");
  if (of == nullptr || *of != it->second) return std::nullopt;
  FoundOutcome found;
  found.entry = *entry;
  found.outcome.entry = *entry;
  found.outcome.outcome_entry = id;
  if (is_dlq) {
    const FleetRecord dead = parse_dead_letter(id, fields);
    found.outcome.outcome = pillbox::outcome_of(dead.record.entry);
    found.outcome.worker = dead.attempts.empty() ? std::string() : dead.attempts.back().worker;
    found.verdict = store::ReplayVerdict::kFailedAgain;
  } else {
    found.outcome.outcome = result_outcome(fields);
    if (const std::string* omitted = entry_field(fields, "output_omitted")) {
      found.outcome.output_omitted = omitted->empty() ? "omitted" : *omitted;
    }
    found.outcome.worker = field_or_empty(fields, "worker");
  }
  return found;
}

// "1700000000000-0" for "1700000000000-7": an outcome, added to another
// stream after its redrive, has an id of at least the redrive's millisecond
// (one server clock) but a sequence of its own.
std::string millisecond_of(const std::string& id) { return id.substr(0, id.find('-')) + "-0"; }

class Redriver {
 public:
  Redriver(FleetQuarantine& q, const ReplayRun& run)
      : q_(q),
        run_(run),
        lock_value_(run.actor + " on " + store::ReplayStore::claim_token()),
        tally_(run, result_, run.on_progress) {}

  Expected<ReplayResult> run(std::vector<FleetRecord> plan);

 private:
  // Records of `plan` an earlier replay redrove without recording how that
  // ended (it died, or gave up waiting), whose redrive a worker has settled
  // since: the outcome is recorded from NAME:results or NAME:dlq, and the
  // record leaves the plan (never redriven a second time for one failure).
  Status adopt_earlier_outcomes(std::vector<FleetRecord>& plan);
  // Takes the record's lock and adds its redrive; the entry, or "" when it
  // was not this replay's to redrive (why: in result_.skipped).
  Expected<std::string> start(FleetRecord& record, std::size_t batch_no);
  // Renews the locks of `flights` once kRenewEvery has passed since the last time.
  Status renew_locks(const std::map<std::string, Flight>& flights);
  // Blocks until every flight of `flights` has its outcome, the batch times
  // out, or a stop signal; returns how many of them failed again.
  Expected<std::size_t> wait(std::map<std::string, Flight>& flights, std::string results_from, std::string dlq_from);
  Status finish(Flight& flight, const RedriveOutcome& outcome, store::ReplayVerdict verdict);

  FleetQuarantine& q_;
  const ReplayRun& run_;
  const std::string lock_value_;
  StopSignals stop_signals_;
  ReplayResult result_;
  ReplayTally tally_;
  Clock::time_point next_renewal_ = Clock::now() + kRenewEvery;
};

Status Redriver::renew_locks(const std::map<std::string, Flight>& flights) {
  if (flights.empty() || Clock::now() < next_renewal_) return Status::ok();
  next_renewal_ = Clock::now() + kRenewEvery;
  std::vector<std::string> texts = {"EVAL", kRenewScript, std::to_string(flights.size())};
  for (const auto& [entry, f] : flights) texts.push_back(q_.keys().lock(f.record.id));
  texts.push_back(lock_value_);
  texts.push_back(std::to_string(kLockLease.count()));
  const std::vector<std::string_view> args(texts.begin(), texts.end());
  auto r = q_.redis().command(args);
  return r ? Status::ok() : Status::error(r.error());
}

Status Redriver::adopt_earlier_outcomes(std::vector<FleetRecord>& plan) {
  const FleetKeys& keys = q_.keys();
  std::map<std::string, std::string> wanted;  // redrive entry -> record id
  std::map<std::string, std::size_t> index;   // redrive entry -> place in plan
  std::string from;                           // the oldest of them
  for (std::size_t i = 0; i < plan.size(); ++i) {
    const std::string& entry = plan[i].state.waiting_entry;
    if (!stream_id(entry)) continue;  // none (or not an id: the redrive script ignores it too)
    auto on_stream = q_.redis().command({"XRANGE", keys.stream.stream, entry, entry});
    if (!on_stream) return Status::error(on_stream.error());
    if ((*on_stream)->type == REDIS_REPLY_ARRAY && (*on_stream)->elements > 0) continue;  // not settled: start() says so
    wanted.emplace(entry, plan[i].id);
    index.emplace(entry, i);
    const std::string ms = millisecond_of(entry);
    if (from.empty() || *stream_id(ms) < *stream_id(from)) from = ms;
  }
  if (wanted.empty()) return Status::ok();
  std::map<std::string, FoundOutcome> found;
  for (const std::string& stream : {keys.stream.results, keys.stream.dlq}) {
    const bool is_dlq = stream == keys.stream.dlq;
    std::string start = from;
    while (found.size() < wanted.size()) {
      auto page = q_.redis().command({"XRANGE", stream, start, "+", "COUNT", std::to_string(kScanPage)});
      if (!page) return Status::error(page.error());
      const redisReply* top = page->get();
      if (top->type != REDIS_REPLY_ARRAY || top->elements == 0) break;
      std::string last;
      for (const StreamEntry& e : stream_entries(top, 2)) {
        if (!e.fields_listed) continue;
        last = e.id;
        if (auto f = outcome_of(last, e.fields, is_dlq, wanted); f && found.count(f->entry) == 0) {
          found.emplace(f->entry, std::move(*f));
        }
      }
      if (top->elements < static_cast<std::size_t>(kScanPage) || last.empty()) break;
      start = "(" + last;
    }
  }
  std::vector<bool> adopted(plan.size(), false);
  for (auto& [entry, f] : found) {
    const std::size_t i = index.at(entry);
    Flight flight{plan[i], entry, true};
    if (auto s = finish(flight, f.outcome, f.verdict); !s) return s;
    adopted[i] = true;
  }
  for (const auto& [entry, i] : index) {
    if (adopted[i]) continue;
    result_.notices.push_back(
        "record " + plan[i].id + ": its earlier redrive (entry " + entry + " of " + keys.stream.stream +
        ") was settled, but its outcome is no longer in " + keys.stream.results + " or " + keys.stream.dlq +
        " (trimmed, or a worker with --no-results ran it); redriven again");
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

Expected<std::string> Redriver::start(FleetRecord& record, std::size_t batch_no) {
  const FleetKeys& keys = q_.keys();
  const std::string lock = keys.lock(record.id);
  const std::string ms = std::to_string(kLockLease.count());
  for (int round = 0; round < kClaimRounds; ++round) {
    auto current = q_.redis().command({"HGET", keys.state, record.id});
    if (!current) return Error{current.error()};
    const std::string before = reply_text(current->get());
    auto state = parse_state(before);
    if (!state) return setup("record " + record.id + ": the field of " + keys.state + " is " + state.error());
    apply_state(record, *state, "");  // the script checks the lock
    if (!claimable(record, run_.force)) {
      result_.skipped.push_back("record " + record.id + " is " + std::string(to_string(record.record.status)) +
                                " now (--force replays it anyway)");
      return std::string();
    }
    FleetState next = *state;
    const std::string waiting = next.waiting_entry;
    next.waiting_entry = "?";  // the script puts the new entry's id here
    next.updated_at = store::now_ms();
    next.audit.push_back({next.updated_at, run_.actor, "redriven",
                          "put back on " + keys.stream.stream + " for the fleet's workers (batch " +
                              std::to_string(batch_no) + ")"});
    auto r = q_.redis().command({"EVAL", kRedriveScript, "3", keys.stream.stream, keys.state, lock, record.id, before,
                                 lock_value_, ms, record.record.entry.key, record.payload, waiting, state_json(next)});
    if (!r) return Error{r.error()};
    const redisReply* top = r->get();
    if (top->type != REDIS_REPLY_ARRAY || top->elements == 0) {
      return setup("Redis at " + q_.address().describe() + ": unexpected reply to the redrive script");
    }
    const std::string what = reply_text(top->element[0]);
    const std::string arg = top->elements > 1 ? reply_text(top->element[1]) : std::string();
    if (what == "added") return arg;
    if (what == "locked") {
      ++result_.taken_by_others;
      result_.skipped.push_back("record " + record.id + " is being replayed right now by " + arg +
                                ": not redriven twice at once");
      return std::string();
    }
    if (what == "waiting") {
      result_.skipped.push_back("record " + record.id + ": its earlier redrive (entry " + arg + " of " +
                                keys.stream.stream + ") still waits for a worker; not redriven again until "
                                "it is settled");
      return std::string();
    }
    // "changed": someone acted on the record in between; read it again.
  }
  return setup("record " + record.id + " kept changing under us; try again");
}

Status Redriver::finish(Flight& flight, const RedriveOutcome& outcome, store::ReplayVerdict verdict) {
  const Outcome& o = outcome.outcome;
  const std::string kind(to_string(o.kind));
  const std::string earlier =
      flight.earlier ? "; redriven by an earlier replay that did not record how it ended, found in " +
                           (verdict == store::ReplayVerdict::kResolved ? q_.keys().stream.results : q_.keys().stream.dlq)
                     : "";
  const std::string detail =
      verdict == store::ReplayVerdict::kResolved
          ? "resolved: ok on worker " + outcome.worker + " (entry " + flight.entry + ", result " + outcome.outcome_entry +
                earlier + ")"
          : "failed again: " + kind + (o.fingerprint.empty() ? "" : " " + o.fingerprint) + " on worker " +
                outcome.worker + " (entry " + flight.entry + ", dead letter " + outcome.outcome_entry + earlier + ")";
  bool recorded_before = false;
  auto changed = q_.change_state(flight.record.id, false, [&](FleetState& s, const FleetRecord&) {
    recorded_before = already_recorded(s, flight.entry);
    if (recorded_before) return Status::ok();  // written as it was: no change
    s.status = store::status_after(verdict);
    s.updated_at = store::now_ms();
    if (s.waiting_entry == flight.entry) s.waiting_entry.clear();
    s.redrives.push_back({.worker = outcome.worker, .ended_at = s.updated_at, .kind = kind,
                          .fingerprint = o.fingerprint, .message = o.message,
                          .charged = verdict == store::ReplayVerdict::kFailedAgain, .entry = flight.entry,
                          .outcome_entry = outcome.outcome_entry});
    s.audit.push_back({s.updated_at, run_.actor, "replayed", detail});
    return Status::ok();
  });
  if (!changed) return Status::error(changed.error(), changed.error_code());
  if (!flight.earlier) {
    auto unlocked = q_.redis().command({"EVAL", kUnlockScript, "1", q_.keys().lock(flight.record.id), lock_value_});
    if (!unlocked) return Status::error(unlocked.error());
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
    // An output larger than the worker's --results-max-output is not in NAME:results.
    const std::string omitted =
        outcome.output_omitted.empty()
            ? ""
            : "its output is not in " + q_.keys().stream.results + " (" + table_cell(outcome.output_omitted, 200) + ")";
    const nlohmann::json id = flight.record.id;
    run_.on_result(ReplayedRecord{id, flight.record.record, o, verdict, 0, omitted, ""});
  }
  tally_.count(verdict, o);
  return Status::ok();
}

Expected<std::size_t> Redriver::wait(std::map<std::string, Flight>& flights, std::string results_from,
                                     std::string dlq_from) {
  const FleetKeys& keys = q_.keys();
  const auto deadline = Clock::now() + run_.batch_timeout;
  std::size_t failed = 0;
  std::map<std::string, std::string> waited_for;  // redrive entry -> record id
  for (const auto& [entry, f] : flights) waited_for.emplace(entry, f.record.id);
  while (!flights.empty()) {
    if (stop_signals_.caught() != 0) break;
    if (auto s = renew_locks(flights); !s) return Error{s.message()};
    const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now());
    if (left.count() <= 0) break;
    const std::string block = std::to_string(std::min(left, kLongestBlock).count());
    auto r = q_.redis().command({"XREAD", "COUNT", "256", "BLOCK", block, "STREAMS", keys.stream.results,
                                 keys.stream.dlq, results_from, dlq_from});
    if (!r) return Error{r.error()};
    const redisReply* top = r->get();
    if (top->type != REDIS_REPLY_ARRAY) continue;  // nil: nothing within `block`
    for (std::size_t s = 0; s < top->elements; ++s) {
      const redisReply* stream = top->element[s];
      if (stream->type != REDIS_REPLY_ARRAY || stream->elements != 2) continue;
      const std::string name = reply_text(stream->element[0]);
      const bool is_dlq = name == keys.stream.dlq;
      for (const StreamEntry& e : stream_entries(stream->element[1], 2)) {
        (is_dlq ? dlq_from : results_from) = e.id;
        if (!e.fields_listed) continue;
        auto found = outcome_of(e.id, e.fields, is_dlq, waited_for);
        if (!found) continue;
        auto it = flights.find(found->entry);
        if (found->verdict == store::ReplayVerdict::kFailedAgain) ++failed;
        if (auto st = finish(it->second, found->outcome, found->verdict); !st) return Error{st.message(), st.code()};
        flights.erase(it);
        waited_for.erase(found->entry);
      }
    }
  }
  return failed;
}

Expected<ReplayResult> Redriver::run(std::vector<FleetRecord> plan) {
  result_.selected = plan.size();
  const FleetKeys& keys = q_.keys();
  if (auto s = adopt_earlier_outcomes(plan); !s) return Error{s.message(), s.code()};
  std::size_t next = 0, batch_no = 0;
  while (next < plan.size() && result_.stopped_because.empty()) {
    // Reached with the outcomes of an earlier replay's redrives alone.
    result_.stopped_because = tally_.stop_after_reason();
    if (!result_.stopped_because.empty()) break;
    const std::size_t size = std::min({tally_.batch_size(), plan.size() - next, tally_.room()});
    ++batch_no;
    auto results_from = last_id(q_.redis(), keys.stream.results);
    if (!results_from) return Error{results_from.error()};
    auto dlq_from = last_id(q_.redis(), keys.stream.dlq);
    if (!dlq_from) return Error{dlq_from.error()};
    std::map<std::string, Flight> flights;  // by the redrive's entry id
    for (std::size_t i = 0; i < size && next < plan.size(); ++i, ++next) {
      // Paced: a start waits for its turn, not for anything that happens;
      // in steps, so that SIGINT/SIGTERM (which a sleep outlasts) stop it.
      std::optional<Clock::time_point> turn;
      while ((turn = tally_.not_before()) && stop_signals_.caught() == 0) {
        if (auto s = renew_locks(flights); !s) return Error{s.message()};
        std::this_thread::sleep_for(std::min<Clock::duration>(*turn - Clock::now(), kLongestBlock));
      }
      if (stop_signals_.caught() != 0) break;
      tally_.take_turn();
      auto entry = start(plan[next], batch_no);
      if (!entry) return Error{entry.error(), entry.error_code()};
      if (entry->empty()) continue;
      flights.emplace(*entry, Flight{std::move(plan[next]), *entry, false});
    }
    const std::size_t started = flights.size();
    auto failed = wait(flights, *results_from, *dlq_from);
    if (!failed) return Error{failed.error(), failed.error_code()};
    const std::size_t ran = started - flights.size();
    std::string ids;
    for (const auto& [entry, f] : flights) ids += (ids.empty() ? "" : ", ") + f.record.id;
    const std::string left = "record" + std::string(flights.size() == 1 ? " " : "s ") + ids + " (their redrives stay on " +
                             keys.stream.stream + ", and the records are not redriven again until a worker settles them";
    if (const int sig = stop_signals_.caught(); sig != 0) {
      result_.stop_signal = sig;
      result_.stopped_because = std::string("stopped by ") + stop_signal_name(sig);
      if (!flights.empty()) result_.stopped_because += "; no outcome yet for " + left + ")";
    } else if (!flights.empty()) {
      result_.stopped_because = "no outcome within --batch-timeout " + std::to_string(run_.batch_timeout.count()) +
                                " ms for " + left + "; are workers running, with NAME:results on?)";
    } else {
      result_.stopped_because = tally_.stop_after_reason();
      if (result_.stopped_because.empty()) result_.stopped_because = tally_.failure_ratio_reason(*failed, ran);
    }
    // Nobody waits for these any more: their locks go, and their redrives,
    // still on the stream, keep them from being redriven again (start()).
    for (const auto& [entry, f] : flights) {
      auto unlocked = q_.redis().command({"EVAL", kUnlockScript, "1", keys.lock(f.record.id), lock_value_});
      if (!unlocked) return Error{unlocked.error()};
    }
  }
  result_.not_replayed = result_.selected - result_.replayed;
  return std::move(result_);
}

}  // namespace

Expected<std::vector<FleetRecord>> redrive_plan(FleetQuarantine& q, const ReplayRun& run,
                                                std::vector<std::string>& skipped) {
  std::vector<FleetRecord> out;
  if (!run.ids.empty()) {
    std::set<std::string> seen;
    for (const auto& id : run.ids) {
      if (!seen.insert(id).second) continue;  // given twice: redriven once
      auto r = q.get(id);
      if (!r) return Error{r.error(), r.error_code()};
      if (!claimable(*r, run.force)) {
        skipped.push_back(r->replaying ? "record " + id + " is being replayed right now by " + r->replaying_by +
                                             ": not redriven twice at once"
                                       : "record " + id + " is " + std::string(to_string(r->record.status)) +
                                             " (--force replays it anyway)");
        continue;
      }
      if (auto ok = check_signed(*r, run.trust_unsigned); !ok) {
        skipped.push_back(ok.message());
        continue;
      }
      out.push_back(std::move(*r));
    }
    return out;
  }
  std::size_t not_open = 0;
  std::vector<std::string> unsigned_ids;
  std::string first_why;
  auto s = q.each_with_payloads([&](const FleetRecord& r) {  // it puts them back on the stream
    if (!fleet_matches(r, run.filter)) return true;
    if (!claimable(r, run.force)) {
      ++not_open;
    } else if (auto ok = check_signed(r, run.trust_unsigned); !ok) {
      if (first_why.empty()) first_why = ok.message();
      unsigned_ids.push_back(r.id);
    } else {
      out.push_back(r);
    }
    return true;
  });
  if (!s) return Error{s.message(), s.code()};
  if (!unsigned_ids.empty()) {
    std::string ids;
    for (std::size_t i = 0; i < unsigned_ids.size() && i < 10; ++i) ids += (i == 0 ? "" : ", ") + unsigned_ids[i];
    if (unsigned_ids.size() > 10) ids += ", ...";
    skipped.push_back(std::to_string(unsigned_ids.size()) + " matching records (" + ids +
                      ") have no valid signature, not redriven; the first: " + first_why);
  }
  if (not_open > 0) {
    skipped.push_back(std::to_string(not_open) +
                      " matching records are resolved, discarded or being replayed (--force replays them too, "
                      "except those being replayed)");
  }
  std::reverse(out.begin(), out.end());  // oldest first
  return out;
}

Expected<ReplayResult> redrive(FleetQuarantine& q, const ReplayRun& run) {
  std::vector<std::string> skipped;
  auto plan = redrive_plan(q, run, skipped);
  if (!plan) return Error{plan.error(), plan.error_code()};
  Redriver redriver(q, run);
  auto result = redriver.run(std::move(*plan));
  if (result) result->skipped.insert(result->skipped.begin(), skipped.begin(), skipped.end());
  return result;
}

}  // namespace pillbox::broker
