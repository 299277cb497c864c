#include "supervisor/broker/redis_redrive.h"

#include <algorithm>
#include <map>
#include <optional>

#include "supervisor/broker/stream_reply.h"
#include "supervisor/io/terminal_text.h"
#include "supervisor/store/replay_store.h"

namespace pillbox::broker {
namespace {

// A redrive lock is a lease: it runs out this long after the replay last
// renewed it (the Redriver renews every 5 s while it starts and waits). A
// replay that dies (SIGKILL) leaves its records "replaying" for at most a
// lease; one stopped for longer (SIGSTOP) may find a record redriven by the
// next replay meanwhile, which is why outcomes are recorded once per
// redrive entry (fleet_redrive.cpp's already_recorded), whoever finds them.
constexpr std::chrono::milliseconds kLockLease{20'000};
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

// An outcome of a redrive in NAME:results or NAME:dlq, only for an `entry`
// of `wanted` (redrive entry -> record id) whose redrive_of names that record.
std::optional<RedriveOutcome> outcome_of(const std::string& id, const EntryFields& fields, bool is_dlq,
                                         const std::map<std::string, std::string>& wanted, const std::string& results) {
  const std::string* entry = entry_field(fields, "entry");
  if (entry == nullptr) return std::nullopt;
  auto it = wanted.find(*entry);
  if (it == wanted.end()) return std::nullopt;  // another redrive's, or no redrive at all
  const std::string* of = entry_field(fields, "redrive_of");
  if (of == nullptr || *of != it->second) return std::nullopt;
  RedriveOutcome found;
  found.entry = *entry;
  found.outcome_entry = id;
  if (is_dlq) {
    const FleetRecord dead = parse_dead_letter(id, fields);
    found.outcome = pillbox::outcome_of(dead.record.entry);
    found.worker = dead.attempts.empty() ? std::string() : dead.attempts.back().worker;
    found.verdict = store::ReplayVerdict::kFailedAgain;
  } else {
    found.outcome = result_outcome(fields);
    // An output larger than the worker's --results-max-output is not there.
    if (const std::string* omitted = entry_field(fields, "output_omitted")) {
      found.output_omitted = "its output is not in " + results + " (" +
                             table_cell(omitted->empty() ? "omitted" : *omitted, 200) + ")";
    }
    found.worker = field_or_empty(fields, "worker");
  }
  return found;
}

// "1700000000000-0" for "1700000000000-7": an outcome, added to another
// stream after its redrive, has an id of at least the redrive's millisecond
// (one server clock) but a sequence of its own.
std::string millisecond_of(const std::string& id) { return id.substr(0, id.find('-')) + "-0"; }

class RedisRedriveRoute final : public RedriveRoute {
 public:
  RedisRedriveRoute(FleetQuarantine& q, const ReplayRun& run)
      : q_(q), run_(run), lock_value_(run.actor + " on " + store::ReplayStore::claim_token()) {}

  FleetDeadLetters& dead_letters() override { return q_; }
  std::string work_name() const override { return q_.keys().stream.stream; }
  std::string results_name() const override { return q_.keys().stream.results; }
  std::string dlq_name() const override { return q_.keys().stream.dlq; }
  std::string no_outcome_hint() const override { return "are workers running, with NAME:results on?"; }

  Expected<std::map<std::string, RedriveOutcome>> earlier_outcomes(const std::vector<FleetRecord>& plan,
                                                                   std::vector<std::string>& notices) override;
  Status mark() override;
  Expected<std::string> start(FleetRecord& record, const RedrivePayload& what, std::size_t batch_no,
                              ReplayResult& result) override;
  Status renew(const std::vector<std::string>& ids) override;
  Expected<std::vector<RedriveOutcome>> outcomes(const std::map<std::string, std::string>& waited,
                                                 std::chrono::milliseconds most) override;
  Status unlock(const std::string& id) override;

 private:
  FleetQuarantine& q_;
  const ReplayRun& run_;
  const std::string lock_value_;
  std::string results_from_ = "0-0";  // where outcomes are read from (mark())
  std::string dlq_from_ = "0-0";
};

Expected<std::map<std::string, RedriveOutcome>> RedisRedriveRoute::earlier_outcomes(
    const std::vector<FleetRecord>& plan, std::vector<std::string>& notices) {
  const FleetKeys& keys = q_.keys();
  std::map<std::string, std::string> wanted;  // redrive entry -> record id
  std::string from;                           // the oldest of them
  for (const FleetRecord& r : plan) {
    const std::string& entry = r.state.waiting_entry;
    if (!stream_id(entry)) continue;  // none (or not an id: the redrive script ignores it too)
    auto on_stream = q_.redis().command({"XRANGE", keys.stream.stream, entry, entry});
    if (!on_stream) return Error{on_stream.error()};
    if ((*on_stream)->type == REDIS_REPLY_ARRAY && (*on_stream)->elements > 0) continue;  // not settled: start() says so
    wanted.emplace(entry, r.id);
    const std::string ms = millisecond_of(entry);
    if (from.empty() || *stream_id(ms) < *stream_id(from)) from = ms;
  }
  std::map<std::string, RedriveOutcome> found;
  if (wanted.empty()) return found;
  for (const std::string& stream : {keys.stream.results, keys.stream.dlq}) {
    const bool is_dlq = stream == keys.stream.dlq;
    std::string start = from;
    while (found.size() < wanted.size()) {
      auto page = q_.redis().command({"XRANGE", stream, start, "+", "COUNT", std::to_string(kScanPage)});
      if (!page) return Error{page.error()};
      const redisReply* top = page->get();
      if (top->type != REDIS_REPLY_ARRAY || top->elements == 0) break;
      std::string last;
      for (const StreamEntry& e : stream_entries(top, 2)) {
        if (!e.fields_listed) continue;
        last = e.id;
        if (auto f = outcome_of(last, e.fields, is_dlq, wanted, keys.stream.results); f && found.count(f->entry) == 0) {
          found.emplace(f->entry, std::move(*f));
        }
      }
      if (top->elements < static_cast<std::size_t>(kScanPage) || last.empty()) break;
      start = "(" + last;
    }
  }
  for (const auto& [entry, id] : wanted) {
    if (found.count(entry) != 0) continue;
    notices.push_back("record " + id + ": its earlier redrive (entry " + entry + " of " + keys.stream.stream +
                      ") was settled, but its outcome is no longer in " + keys.stream.results + " or " +
                      keys.stream.dlq + " (trimmed, or a worker with --no-results ran it); redriven again");
  }
  return found;
}

Status RedisRedriveRoute::mark() {
  auto results_from = last_id(q_.redis(), q_.keys().stream.results);
  if (!results_from) return Status::error(results_from.error());
  auto dlq_from = last_id(q_.redis(), q_.keys().stream.dlq);
  if (!dlq_from) return Status::error(dlq_from.error());
  results_from_ = *results_from;
  dlq_from_ = *dlq_from;
  return Status::ok();
}

Expected<std::string> RedisRedriveRoute::start(FleetRecord& record, const RedrivePayload& what, std::size_t batch_no,
                                               ReplayResult& result) {
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
    if (!redrive_claimable(record, run_.scope())) {
      result.skipped.push_back("record " + record.id + " " +
                               not_replayable_why(record.record.status, run_.scope(), record.id));
      return std::string();
    }
    if (auto allowed = check_redrive_allowance(q_, record, run_); !allowed) {  // revoked since the plan, say
      result.skipped.push_back(allowed.message());
      return std::string();
    }
    if (const std::string why = patched_since(*state, what, record.id); !why.empty()) {
      result.skipped.push_back(why);
      return std::string();
    }
    FleetState next = *state;
    const std::string waiting = next.waiting_entry;
    next.waiting_entry = "?";  // the script puts the new entry's id here
    next.waiting_revision = what.revision;
    next.updated_at = store::now_ms();
    next.audit.push_back({next.updated_at, run_.actor, "redriven",
                          "put back on " + keys.stream.stream + " for the fleet's workers (batch " +
                              std::to_string(batch_no) + ")"});
    auto r = q_.redis().command({"EVAL", kRedriveScript, "3", keys.stream.stream, keys.state, lock, record.id, before,
                                 lock_value_, ms, record.record.entry.key,
                                 what.revision > 0 ? what.bytes : record.payload, waiting, state_json(next)});
    if (!r) return Error{r.error()};
    const redisReply* top = r->get();
    if (top->type != REDIS_REPLY_ARRAY || top->elements == 0) {
      return setup("Redis at " + q_.address().describe() + ": unexpected reply to the redrive script");
    }
    const std::string what = reply_text(top->element[0]);
    const std::string arg = top->elements > 1 ? reply_text(top->element[1]) : std::string();
    if (what == "added") return arg;
    if (what == "locked") {
      ++result.taken_by_others;
      result.skipped.push_back("record " + record.id + " is being replayed right now by " + arg +
                               ": not redriven twice at once");
      return std::string();
    }
    if (what == "waiting") {
      result.skipped.push_back("record " + record.id + ": its earlier redrive (entry " + arg + " of " +
                               keys.stream.stream + ") still waits for a worker; not redriven again until "
                               "it is settled");
      return std::string();
    }
    // "changed": someone acted on the record in between; read it again.
  }
  return setup("record " + record.id + " kept changing under us; try again");
}

Status RedisRedriveRoute::renew(const std::vector<std::string>& ids) {
  std::vector<std::string> texts = {"EVAL", kRenewScript, std::to_string(ids.size())};
  for (const std::string& id : ids) texts.push_back(q_.keys().lock(id));
  texts.push_back(lock_value_);
  texts.push_back(std::to_string(kLockLease.count()));
  const std::vector<std::string_view> args(texts.begin(), texts.end());
  auto r = q_.redis().command(args);
  return r ? Status::ok() : Status::error(r.error());
}

Expected<std::vector<RedriveOutcome>> RedisRedriveRoute::outcomes(const std::map<std::string, std::string>& waited,
                                                                  std::chrono::milliseconds most) {
  const FleetKeys& keys = q_.keys();
  std::vector<RedriveOutcome> found;
  auto r = q_.redis().command({"XREAD", "COUNT", "256", "BLOCK", std::to_string(most.count()), "STREAMS",
                               keys.stream.results, keys.stream.dlq, results_from_, dlq_from_});
  if (!r) return Error{r.error()};
  const redisReply* top = r->get();
  if (top->type != REDIS_REPLY_ARRAY) return found;  // nil: nothing within `most`
  for (std::size_t s = 0; s < top->elements; ++s) {
    const redisReply* stream = top->element[s];
    if (stream->type != REDIS_REPLY_ARRAY || stream->elements != 2) continue;
    const bool is_dlq = reply_text(stream->element[0]) == keys.stream.dlq;
    for (const StreamEntry& e : stream_entries(stream->element[1], 2)) {
      (is_dlq ? dlq_from_ : results_from_) = e.id;
      if (!e.fields_listed) continue;
      if (auto o = outcome_of(e.id, e.fields, is_dlq, waited, keys.stream.results)) found.push_back(std::move(*o));
    }
  }
  return found;
}

Status RedisRedriveRoute::unlock(const std::string& id) {
  auto unlocked = q_.redis().command({"EVAL", kUnlockScript, "1", q_.keys().lock(id), lock_value_});
  return unlocked ? Status::ok() : Status::error(unlocked.error());
}

}  // namespace

std::unique_ptr<RedriveRoute> redis_redrive_route(FleetQuarantine& quarantine, const ReplayRun& run) {
  return std::make_unique<RedisRedriveRoute>(quarantine, run);
}

}  // namespace pillbox::broker
