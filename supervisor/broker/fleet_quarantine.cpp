#include "supervisor/broker/fleet_quarantine.h"

#include <algorithm>
#include <cerrno>
#include <charconv>
#include <cstdlib>
#include <optional>

#include "shared/sha256.h"
#include "supervisor/broker/fleet_minimize_keeper.h"
#include "supervisor/broker/redis_redrive.h"
#include "supervisor/io/terminal_text.h"

namespace pillbox::broker {
namespace {

// Entries read per XREVRANGE: one page of a listing.
constexpr std::size_t kPage = 256;
// Compare-and-set rounds before change_state gives up (each round lost means
// another process changed the record in between).
constexpr int kCasRounds = 16;

// KEYS: state hash, lock. ARGV: id, expected value ('' = no field), new
// value, '1' to refuse while the lock exists. Returns {1, holder} when set,
// {0, ''} when the value changed meanwhile, {-1, holder} when locked.
constexpr const char* kCasScript = R"lua(
local cur = redis.call('HGET', KEYS[1], ARGV[1])
if not cur then cur = '' end
if cur ~= ARGV[2] then return {0, ''} end
local holder = redis.call('GET', KEYS[2])
if ARGV[4] == '1' and holder then return {-1, holder} end
redis.call('HSET', KEYS[1], ARGV[1], ARGV[3])
return {1, holder or ''}
)lua";

// KEYS: state hash, then each record's lock. ARGV: the records' ids.
// Returns {states, locks}: each record's state ('' when none) and its lock's
// holder ('' when none), or {type} for a lock key of another type (GET
// would fail the whole page; only that record cannot be read).
constexpr const char* kStatesScript = R"lua(
local states = redis.call('HMGET', KEYS[1], unpack(ARGV))
local locks = {}
for i = 2, #KEYS do
  local v = redis.pcall('GET', KEYS[i])
  if type(v) == 'table' and v.err then
    locks[i - 1] = {redis.call('TYPE', KEYS[i]).ok}
  else
    locks[i - 1] = v or ''
  end
  if not states[i - 1] then states[i - 1] = '' end
end
return {states, locks}
)lua";

// A page of a listing without large payloads (a dead letter may hold
// megabytes; 256 of them were read to list one record). KEYS: NAME:dlq.
// ARGV: the page's end (an id, "(id" or "+"), how many entries, the largest
// payload returned. Returns {{id, fields, omitted, attempt_of}...}: omitted
// is -1 when the payload is there, else its length (the payload then "");
// attempt_of is 0 when redrive_of names no dead letter (forged: it lists as a
// record), else 1. Reads 4 entries at a time, so Redis holds only those.
constexpr const char* kPageScript = R"lua(
local out = {}
local last = ARGV[1]
local want = tonumber(ARGV[2])
local inline = tonumber(ARGV[3])
while #out < want do
  local batch = redis.call('XREVRANGE', KEYS[1], last, '-', 'COUNT', 4)
  if #batch == 0 then break end
  for _, e in ipairs(batch) do
    if #out < want then
      local f = e[2]
      local omitted = -1
      local attempt_of = 1
      for i = 1, #f - 1, 2 do
        if f[i] == 'payload' and string.len(f[i + 1]) > inline then
          omitted = string.len(f[i + 1])
          f[i + 1] = ''
        elseif f[i] == 'redrive_of' then
          local named = redis.pcall('XRANGE', KEYS[1], f[i + 1], f[i + 1])
          if type(named) ~= 'table' or named.err or #named == 0 then attempt_of = 0 end
        end
      end
      out[#out + 1] = {e[1], f, omitted, attempt_of}
    end
    last = '(' .. e[1]
  end
  if #batch < 4 then break end
end
return out
)lua";

// Payloads up to this size come with a listing's page (a record whose
// `record` field is unreadable takes its sha256 from them); larger ones are
// read one at a time by get().
constexpr std::size_t kListedPayloadBytes = 64 << 10;

// The entries of an XRANGE/XREVRANGE reply, or of kPageScript's (which adds two elements to each).
std::vector<StreamEntry> entries_of(const redisReply* r) { return stream_entries(r, 2, /*or_more=*/true); }

// A dead letter whose redrive_of names no record (forged, or its record
// trimmed away) is a record of its own, said so: hidden, it would be a dead
// letter nobody sees.
void orphan_attempt(FleetRecord& r) {
  r.record.entry.message = "its redrive_of names " + r.redrive_of +
                           ", which is no dead letter here: listed as a record of its own. " + r.record.entry.message;
  r.redrive_of.clear();
}

Status key_type_is(RedisConnection& redis, const std::string& key, const char* what) {
  auto type = redis.command({"TYPE", key});
  if (!type) return Status::error(type.error());
  const std::string t = reply_text(type->get());
  if (t != "none" && t != "stream") {
    return Status::error("the key '" + key + "' on " + redis.address().describe() + " holds a " + t + ", not " + what +
                         ": check --stream");
  }
  return Status::ok();
}

}  // namespace

FleetKeys fleet_keys(const std::string& name) {
  const StreamKeys s = stream_keys(name);
  return {.stream = s, .state = s.dlq + ":state", .lock_prefix = s.dlq + ":lock:",
          .minimizing_prefix = s.dlq + ":minimizing:", .minimized_prefix = s.dlq + ":minimized:",
          .revisions_prefix = s.dlq + ":revisions:"};
}

std::string fleet_location(const RedisAddress& address, const FleetKeys& keys) {
  return address.describe() + " " + keys.stream.dlq;
}

Expected<std::string> parse_fleet_id(const std::string& text) {
  const auto dash = text.find('-');
  // A part as Redis reads it (a 64-bit number), written as Redis writes it
  // (no leading zeros): one record has one id text, so that two spellings
  // of it are never taken for two records.
  auto number = [](std::string_view s) -> std::optional<std::string> {
    if (s.empty() || s.size() > 20 || !std::all_of(s.begin(), s.end(), [](char c) { return c >= '0' && c <= '9'; })) {
      return std::nullopt;
    }
    errno = 0;
    const unsigned long long n = std::strtoull(std::string(s).c_str(), nullptr, 10);
    if (errno == ERANGE) return std::nullopt;
    return std::to_string(n);
  };
  const auto ms = dash == std::string::npos ? std::nullopt : number(std::string_view(text).substr(0, dash));
  const auto seq = dash == std::string::npos ? std::nullopt : number(std::string_view(text).substr(dash + 1));
  if (!ms || !seq) {
    return Error::usage("'" + text + "' is not a record ID of the fleet's quarantine: its IDs are dead-letter entry IDs "
                        "such as 1712345678901-0 (see: pillbox quarantine list --redis URL --stream NAME)");
  }
  return *ms + "-" + *seq;
}

Expected<FleetQuarantine> FleetQuarantine::open(const RedisAddress& address, const std::string& stream) {
  auto redis = RedisConnection::open(address);
  if (!redis) return Error{redis.error(), redis.error_code()};
  return open(std::move(*redis), stream);
}

Expected<FleetQuarantine> FleetQuarantine::open(RedisConnection redis, const std::string& stream) {
  FleetKeys keys = fleet_keys(stream);
  if (auto s = key_type_is(redis, keys.stream.dlq, "a dead-letter stream"); !s) return Error{s.message()};
  if (auto s = key_type_is(redis, keys.stream.stream, "a stream of tasks"); !s) return Error{s.message()};
  return FleetQuarantine(std::move(redis), std::move(keys));
}

Status FleetQuarantine::load_states(std::vector<FleetRecord>& records) {
  if (records.empty()) return Status::ok();
  std::vector<std::string> locks;
  locks.reserve(records.size());
  for (const auto& r : records) locks.push_back(keys_.lock(r.id));
  std::vector<std::string_view> command = {"EVAL", kStatesScript, "", keys_.state};
  const std::string nkeys = std::to_string(records.size() + 1);
  command[2] = nkeys;
  for (const auto& l : locks) command.push_back(l);
  for (const auto& r : records) command.push_back(r.id);
  auto reply = redis_.command(command);
  if (!reply) return Status::error(reply.error());
  const redisReply* top = reply->get();
  if (top->type != REDIS_REPLY_ARRAY || top->elements != 2 || top->element[0]->type != REDIS_REPLY_ARRAY ||
      top->element[1]->type != REDIS_REPLY_ARRAY || top->element[0]->elements != records.size() ||
      top->element[1]->elements != records.size()) {
    return Status::error("Redis at " + address().describe() + ": unexpected reply to the states script");
  }
  for (std::size_t i = 0; i < records.size(); ++i) {
    const redisReply* lock = top->element[1]->element[i];
    std::string holder;
    std::string unreadable;
    if (lock->type == REDIS_REPLY_ARRAY) {
      unreadable = "its redrive lock " + locks[i] + " on " + address().describe() + " holds a " +
                   (lock->elements == 1 ? reply_text(lock->element[0]) : std::string("?")) +
                   ", not a lock pillbox wrote; delete that key";
    } else {
      holder = reply_text(lock);
    }
    auto state = parse_state(reply_text(top->element[0]->element[i]));
    if (!state) {
      // Only this record: the rest of the page lists as it is.
      unreadable = "its state cannot be read: field " + records[i].id + " of " + keys_.state + " on " +
                   address().describe() + " is " + state.error() + "; leave that hash to pillbox";
    }
    apply_state(records[i], state ? std::move(*state) : FleetState{}, holder);
    records[i].unreadable_state = std::move(unreadable);
  }
  return Status::ok();
}

FleetRecord FleetQuarantine::read_dead_letter(const std::string& id, const EntryFields& fields,
                                              std::optional<std::int64_t> omitted_payload_size) const {
  FleetRecord r = parse_dead_letter(id, fields, omitted_payload_size);
  if (key_) {
    // A payload a listing left unread is checked as the hash its record
    // claims; a verb that runs it reads it (get) and checks its bytes.
    r.signature = key_->verify(keys_.stream.dlq, fields, r.payload_omitted ? &r.record.entry.payload_sha256 : nullptr);
  }
  return r;
}

Status FleetQuarantine::each(const std::function<bool(const FleetRecord&)>& fn) {
  std::string end = "+";
  const std::string count = std::to_string(kPage);
  const std::string inline_bytes = std::to_string(kListedPayloadBytes);
  for (;;) {
    auto reply = redis_.command({"EVAL", kPageScript, "1", keys_.stream.dlq, end, count, inline_bytes});
    if (!reply) return Status::error(reply.error());
    auto entries = entries_of(reply->get());
    if (entries.empty()) return Status::ok();
    std::vector<FleetRecord> page;
    for (const StreamEntry& e : entries) {
      std::optional<std::int64_t> omitted;
      if (e.reply->elements == 4 && reply_integer(e.reply->element[2], -1) >= 0) {
        omitted = reply_integer(e.reply->element[2], -1);
      }
      FleetRecord r = read_dead_letter(e.id, e.fields, omitted);
      if (!r.redrive_of.empty() && e.reply->elements == 4 &&
          reply_integer(e.reply->element[3], 1) == 0) {
        orphan_attempt(r);
      }
      if (r.redrive_of.empty()) page.push_back(std::move(r));  // a redrive's dead letter is an attempt
    }
    if (auto s = load_states(page); !s) return s;
    for (const auto& r : page) {
      if (!fn(r)) return Status::ok();
    }
    if (entries.size() < kPage) return Status::ok();
    end = "(" + entries.back().id;  // exclusive: the next page starts below it
  }
}

Expected<FleetRecord> FleetQuarantine::get(const std::string& id) {
  auto checked = parse_fleet_id(id);
  if (!checked) return Error{checked.error(), checked.error_code()};
  auto reply = redis_.command({"XRANGE", keys_.stream.dlq, id, id});
  if (!reply) return Error{reply.error()};
  auto entries = entries_of(reply->get());
  if (entries.empty()) {
    return Error::usage("no record " + id + " in the fleet's quarantine (" + keys_.stream.dlq + " on " +
                        address().describe() + "; see: pillbox quarantine list --redis URL --stream NAME)");
  }
  std::vector<FleetRecord> one;
  one.push_back(read_dead_letter(entries[0].id, entries[0].fields));
  if (!one[0].redrive_of.empty()) {
    bool named_exists = false;
    if (auto named = parse_fleet_id(one[0].redrive_of)) {
      auto found = redis_.command({"XRANGE", keys_.stream.dlq, *named, *named});
      if (!found) return Error{found.error()};
      named_exists = !entries_of(found->get()).empty();
    }
    if (!named_exists) orphan_attempt(one[0]);
  }
  if (!one[0].redrive_of.empty()) {
    return Error::usage(id + " is the dead letter of a redrive of record " + one[0].redrive_of +
                        ", not a record of its own: it is an attempt of " + one[0].redrive_of + " (quarantine show " +
                        one[0].redrive_of + ")");
  }
  if (auto s = load_states(one); !s) return Error{s.message()};
  return std::move(one[0]);
}

Expected<FleetRecord> FleetQuarantine::change_state(const std::string& id, bool refuse_while_replaying,
                                                    const StateChange& change) {
  auto record = get(id);
  if (!record) return record;
  const std::string lock = keys_.lock(id);
  for (int round = 0; round < kCasRounds; ++round) {
    auto current = redis_.command({"HGET", keys_.state, id});
    if (!current) return Error{current.error()};
    const std::string before = reply_text(current->get());
    auto state = parse_state(before);
    if (!state) return Error{"record " + id + ": the field of " + keys_.state + " is " + state.error()};
    apply_state(*record, *state, record->replaying_by);
    if (auto s = change(*state, *record); !s) return Error{s.message(), s.code()};
    const std::string after = state_json(*state);
    auto r = redis_.command({"EVAL", kCasScript, "2", keys_.state, lock, id, before, after,
                             refuse_while_replaying ? "1" : "0"});
    if (!r) return Error{r.error()};
    const redisReply* top = r->get();
    if (top->type != REDIS_REPLY_ARRAY || top->elements != 2) {
      return Error{"Redis at " + address().describe() + ": unexpected reply to the state script"};
    }
    const long long outcome = reply_integer(top->element[0], 0);
    const std::string holder = reply_text(top->element[1]);
    if (outcome == -1) {
      return Error::usage("record " + id + " is being replayed right now (by " + holder +
                          "); act on it when that replay is over");
    }
    if (outcome == 1) {
      apply_state(*record, std::move(*state), holder);
      return record;
    }
  }
  return Error{"record " + id + " kept changing under us (" + std::to_string(kCasRounds) +
               " tries); try again"};
}

store::AuditEntry FleetQuarantine::dead_lettering(const FleetRecord& r) const {
  std::string worker = "a worker";
  if (!r.attempts.empty() && !r.attempts.back().worker.empty()) worker = r.attempts.back().worker;
  return {r.record.created_at, "worker " + worker + (r.group.empty() ? "" : " of group " + r.group), "quarantined",
          (r.reason.empty() ? std::string("dead-lettered") : r.reason) + " (delivery " + std::to_string(r.deliveries) +
              " of entry " + r.source_entry + " of " + (r.stream.empty() ? std::string("the stream") : r.stream) +
              ")"};
}

void FleetQuarantine::add_broker_json(const FleetRecord& r, nlohmann::json& full) const {
  full["stream"] = {{"name", r.stream}, {"group", r.group}, {"entry", r.source_entry}, {"deliveries", r.deliveries}};
}

Expected<PayloadBytes> FleetQuarantine::minimized_payload(const FleetRecord& r) {
  const std::string& sha = r.record.minimized_sha256;
  if (sha.empty()) {
    return Error{"record " + r.id + " has no minimized payload (pillbox minimize " + r.id + hint_options() + ")",
                 ErrorCode::kUsage};
  }
  auto bytes = redis_.command({"GET", keys_.minimized(r.id)});
  if (!bytes) return Error{bytes.error()};
  std::string payload = reply_text(bytes->get());
  if (sha256_hex(payload) != sha) {
    return Error{"the minimized payload of record " + r.id + " (" + keys_.minimized(r.id) +
                 ") does not match the sha256 its state names (" + sha + ")"};
  }
  return PayloadBytes{std::move(payload), sha};
}

std::unique_ptr<MinimizeKeeper> FleetQuarantine::minimize_keeper(const std::string& id, const std::string& actor) {
  return fleet_minimize_keeper(*this, id, actor);
}

Expected<std::int64_t> FleetQuarantine::keep_revision_payload(const FleetRecord& record, std::string_view bytes) {
  const std::string sha = sha256_hex(bytes);
  auto set = redis_.command({"HSET", keys_.revisions(record.id), sha, bytes});
  if (!set) return Error{set.error()};
  return std::int64_t{-1};
}

Expected<std::string> FleetQuarantine::revision_payload(const FleetRecord& record, const FleetRevision& revision) {
  const std::string key = keys_.revisions(record.id);
  const std::string& sha = revision.payload_sha256;
  // Its size first: never more than the state names is read.
  auto size = redis_.command({"HSTRLEN", key, sha});
  if (!size) return Error{size.error()};
  const long long found = reply_integer(size->get(), -1);
  const std::string where = "field " + table_cell(sha, 80) + " of " + key;
  if (found <= 0 && revision.payload_size != 0) {
    return Error::usage("its payload is not in " + where + " (deleted, or never written)");
  }
  if (found != revision.payload_size) {
    return Error::usage("its payload in " + where + " is " + std::to_string(found) + " bytes, not the " +
                        std::to_string(revision.payload_size) + " its state names");
  }
  auto bytes = redis_.command({"HGET", key, sha});
  if (!bytes) return Error{bytes.error()};
  std::string payload = reply_text(bytes->get());
  if (static_cast<std::int64_t>(payload.size()) != revision.payload_size || sha256_hex(payload) != sha) {
    return Error::usage("its payload in " + where + " does not match the sha256 its state names");
  }
  return payload;
}

Expected<std::vector<FleetRecord>> FleetQuarantine::redrive_plan(const ReplayRun& run,
                                                                 std::vector<std::string>& skipped) {
  return broker::redrive_plan(*this, run, skipped);
}

Expected<ReplayResult> FleetQuarantine::redrive(const ReplayRun& run) {
  return broker::redrive(*redis_redrive_route(*this, run), run);
}

}  // namespace pillbox::broker
