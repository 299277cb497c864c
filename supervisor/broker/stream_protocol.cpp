#include "supervisor/broker/stream_protocol.h"

#include <cstdio>
#include <mutex>

namespace pillbox::broker {
namespace {

// Every fenced script starts with this. held(): the entry is pending on this
// consumer (ARGV[2]). The owner is the fence, not the delivery count: a
// worker's XAUTOCLAIM may take back its own entry (after Redis was away past
// --claim-idle), which stays its own to settle. Two live workers never share
// a name.
constexpr const char* kFence = R"lua(
local function held(stream, group, id, me)
  local p = redis.call('XPENDING', stream, group, id, id, 1)
  if #p == 0 then return false end
  return p[1][2] == me
end

-- An entry's recorded deliveries (HGETALL); when its key holds something
-- else than a hash (not written by pillbox), the name of that type: HGETALL
-- or HSET would fail the whole script, and with it the worker.
local function history(key)
  local t = redis.call('TYPE', key)['ok']
  if t == 'none' then return {} end
  if t ~= 'hash' then return t end
  return redis.call('HGETALL', key)
end
)lua";

// KEYS: stream, history. ARGV: group, me, id, field (delivery number), json, ttl ms.
// Returns 1, 0 when not held, or the type the history key holds instead of a hash.
constexpr const char* kRecordBody = R"lua(
if not held(KEYS[1], ARGV[1], ARGV[3], ARGV[2]) then return 0 end
local h = history(KEYS[2])
if type(h) == 'string' then return h end
redis.call('HSET', KEYS[2], ARGV[4], ARGV[5])
redis.call('PEXPIRE', KEYS[2], ARGV[6])
return 1
)lua";

// KEYS: stream, history. ARGV: group, me, id.
// Returns {} when not held or deleted, else {count, history...}.
constexpr const char* kRedeliverBody = R"lua(
if not held(KEYS[1], ARGV[1], ARGV[3], ARGV[2]) then return {} end
local c = redis.call('XCLAIM', KEYS[1], ARGV[1], ARGV[2], 0, ARGV[3])
if #c == 0 or not c[1] then
  -- Deleted from the stream (XCLAIM dropped it from the pending list): its
  -- history goes too, nobody can claim it any more.
  redis.call('DEL', KEYS[2])
  return {}
end
local p = redis.call('XPENDING', KEYS[1], ARGV[1], ARGV[3], ARGV[3], 1)
return {p[1][4], history(KEYS[2])}
)lua";

// KEYS: stream, target (or the stream again when none), history.
// ARGV: group, me, id, has target (0/1), maxlen (0: none), fields...
// Returns {} when not held, else {added id or ''}.
// An entry deleted from the stream (XDEL, MAXLEN) while held is gone, as
// Redis has it: the next XCLAIM or XAUTOCLAIM, by any worker, would drop it
// from the pending list. So it is never settled, whoever notices first:
// acknowledged, its history deleted, nothing added, and {} (not held).
constexpr const char* kSettleBody = R"lua(
if not held(KEYS[1], ARGV[1], ARGV[3], ARGV[2]) then return {} end
if #redis.call('XRANGE', KEYS[1], ARGV[3], ARGV[3]) == 0 then
  redis.call('XACK', KEYS[1], ARGV[1], ARGV[3])
  redis.call('DEL', KEYS[3])
  return {}
end
local added = ''
if ARGV[4] == '1' then
  local args = {KEYS[2]}
  if tonumber(ARGV[5]) > 0 then
    args[#args + 1] = 'MAXLEN'; args[#args + 1] = '~'; args[#args + 1] = ARGV[5]
  end
  args[#args + 1] = '*'
  for i = 6, #ARGV do args[#args + 1] = ARGV[i] end
  added = redis.call('XADD', unpack(args))
end
redis.call('XACK', KEYS[1], ARGV[1], ARGV[3])
redis.call('XDEL', KEYS[1], ARGV[3])
redis.call('DEL', KEYS[3])
return {added}
)lua";

// KEYS: stream. ARGV: group, me, then ids. Returns the ids not held.
constexpr const char* kRenewBody = R"lua(
local lost = {}
for i = 3, #ARGV do
  if held(KEYS[1], ARGV[1], ARGV[i], ARGV[2]) then
    redis.call('XCLAIM', KEYS[1], ARGV[1], ARGV[2], 0, ARGV[i], 'JUSTID')
  else
    lost[#lost + 1] = ARGV[i]
  end
end
return lost
)lua";

// KEYS: stream. ARGV: group, me, min idle ms, start, count, history prefix.
// XAUTOCLAIM raises each claimed entry's delivery count; the script returns
// it with the entry's fields and history: {next, {{id, fields, count, history}...}}.
// The history keys are derived from the stream's name (same hash tag).
constexpr const char* kClaimBody = R"lua(
local r = redis.call('XAUTOCLAIM', KEYS[1], ARGV[1], ARGV[2], ARGV[3], ARGV[4], 'COUNT', ARGV[5])
-- Entries deleted from the stream (XAUTOCLAIM dropped them from the pending
-- list, Redis 7): their history goes too, nobody can claim them any more.
for _, id in ipairs(r[3] or {}) do redis.call('DEL', ARGV[6] .. id) end
local out = {}
for _, e in ipairs(r[2]) do
  if e and e[2] then
    local p = redis.call('XPENDING', KEYS[1], ARGV[1], e[1], e[1], 1)
    if #p > 0 then
      out[#out + 1] = {e[1], e[2], p[1][4], history(ARGV[6] .. e[1])}
    end
  end
end
return {r[1], out}
)lua";

// EVALSHA, loading the script again when the server lacks it (NOSCRIPT: a
// restarted Redis empties its script cache).
Expected<RedisReply> eval(RedisConnection& redis, const char* body, const std::vector<std::string_view>& keys,
                          const std::vector<std::string_view>& argv) {
  static std::mutex mutex;
  static std::map<const char*, std::string> shas;
  std::string sha;
  {
    std::lock_guard lock(mutex);
    sha = shas[body];
  }
  const std::string nkeys = std::to_string(keys.size());
  auto call = [&](std::string_view verb, std::string_view what) {
    std::vector<std::string_view> args = {verb, what, nkeys};
    args.insert(args.end(), keys.begin(), keys.end());
    args.insert(args.end(), argv.begin(), argv.end());
    return redis.command(args);
  };
  if (!sha.empty()) {
    auto r = call("EVALSHA", sha);
    if (r || r.error().find("NOSCRIPT") == std::string::npos) return r;
  }
  // The script's text is the fence and the body.
  const std::string text = std::string(kFence) + body;
  auto loaded = redis.command({"SCRIPT", "LOAD", text});
  if (!loaded) return Error{loaded.error()};
  sha = reply_text(loaded->get());
  {
    std::lock_guard lock(mutex);
    shas[body] = sha;
  }
  return call("EVALSHA", sha);
}

std::map<std::uint32_t, std::string> history_of(const redisReply* r) {
  std::map<std::uint32_t, std::string> out;
  for (auto& [field, value] : field_pairs(r)) {
    char* end = nullptr;
    const unsigned long n = std::strtoul(field.c_str(), &end, 10);
    if (end != field.c_str() && *end == '\0' && n > 0 && n < (1ul << 31)) out[static_cast<std::uint32_t>(n)] = value;
  }
  return out;
}

// An entry's history as the scripts return it: the hash's fields, or the
// type its key holds instead (`history_type`).
void read_history(const redisReply* r, Delivery& d) {
  if (r != nullptr && r->type == REDIS_REPLY_ARRAY) {
    d.history = history_of(r);
  } else {
    d.history_type = reply_text(r);
    if (d.history_type.empty()) d.history_type = "?";
  }
}

// A value of an XINFO reply (a flat list: name, value, ...), "" when absent.
std::string info_field(const redisReply* r, std::string_view name) { return field_or_empty(field_pairs(r), name); }

// The element of an XINFO GROUPS reply that is `group`'s, or nullptr.
const redisReply* group_info(const redisReply* groups, const std::string& group) {
  for (std::size_t i = 0; groups->type == REDIS_REPLY_ARRAY && i < groups->elements; ++i) {
    if (info_field(groups->element[i], "name") == group) return groups->element[i];
  }
  return nullptr;
}

Error malformed(const RedisConnection& redis, const std::string& what) {
  return Error{"Redis at " + redis.address().describe() + ": unexpected reply to " + what};
}

std::string ms_text(std::chrono::milliseconds ms) { return std::to_string(ms.count()); }

std::string not_a_stream(const RedisConnection& redis, std::string_view key, const std::string& type,
                         const std::string& advice) {
  return "the key '" + std::string(key) + "' on " + redis.address().describe() + " holds a " + type +
         ", not a stream: " + advice;
}

// Redis names no key in a WRONGTYPE, NOGROUP or UNBLOCKED error (a script's
// is about "@user_script:19"): says which key is not what the worker needs,
// as create_group does at the start. Such errors stop the worker (every
// later step would fail alike); the operator must know what to fix.
// `target`: the stream the step adds to (results, dead letters), if any.
Error explained(RedisConnection& redis, const StreamKeys& keys, const std::string& group, const std::string& error,
                std::string_view target = {}) {
  const bool wrong_type = error.find("WRONGTYPE") != std::string::npos;
  const bool no_group =
      error.find("NOGROUP") != std::string::npos || error.find("UNBLOCKED") != std::string::npos;
  if ((!wrong_type && !no_group) || redis.broken()) return Error{error};
  auto type_of = [&](std::string_view key) -> std::string {
    auto t = redis.command({"TYPE", key});
    return t ? reply_text(t->get()) : "";
  };
  const std::string stream = type_of(keys.stream);
  if (stream != "stream" && stream != "none" && !stream.empty()) {
    return Error{not_a_stream(redis, keys.stream, stream, "it was replaced while the worker ran; give another --stream, or remove that key")};
  }
  if (stream == "none") {
    return Error{"the stream '" + keys.stream + "' on " + redis.address().describe() +
                 " was deleted while the worker ran, and its consumer group with it"};
  }
  if (!target.empty()) {
    const std::string t = type_of(target);
    if (t != "stream" && t != "none" && !t.empty()) {
      return Error{not_a_stream(redis, target, t, "pillbox adds to it; remove or rename that key")};
    }
  }
  if (no_group) {
    return Error{"the consumer group '" + group + "' of the stream '" + keys.stream + "' on " +
                 redis.address().describe() + " was destroyed while the worker ran (XGROUP DESTROY)"};
  }
  return Error{error};
}

}  // namespace

StreamKeys stream_keys(const std::string& name) {
  return StreamKeys{name, name + ":results", name + ":dlq", name + ":attempts:", name + ":dlq:fingerprints"};
}

std::string fingerprint_label(const std::string& kind, const std::string& fingerprint) {
  return fingerprint.empty() ? kind : kind + " " + fingerprint;
}

Expected<bool> note_dead_letter_fingerprint(RedisConnection& redis, const StreamKeys& keys, const std::string& label) {
  auto r = redis.command({"SADD", keys.dlq_fingerprints, label});
  if (!r) return Error{r.error()};
  if ((*r)->type != REDIS_REPLY_INTEGER) return malformed(redis, "SADD " + keys.dlq_fingerprints);
  return (*r)->integer == 1;
}

Status create_group(RedisConnection& redis, const StreamKeys& keys, const std::string& group) {
  auto type = redis.command({"TYPE", keys.stream});
  if (!type) return Status::error(type.error());
  const std::string t = reply_text(type->get());
  if (t != "none" && t != "stream") {
    return Status::error(not_a_stream(redis, keys.stream, t, "give another --stream, or remove that key"));
  }
  if (t == "stream") {
    // An existing group needs no write (a full Redis refuses XGROUP CREATE
    // with -OOM even when the group is there).
    auto groups = redis.command({"XINFO", "GROUPS", keys.stream});
    if (!groups) return Status::error(groups.error());
    if (group_info(groups->get(), group) != nullptr) return Status::ok();
  }
  auto r = redis.command({"XGROUP", "CREATE", keys.stream, group, "0", "MKSTREAM"});
  if (!r && r.error().find("BUSYGROUP") == std::string::npos) return Status::error(r.error());
  return Status::ok();
}

std::optional<StreamId> stream_id(const std::string& id) {
  unsigned long long ms = 0, seq = 0;
  char extra = 0;
  if (std::sscanf(id.c_str(), "%llu-%llu%c", &ms, &seq, &extra) != 2) return std::nullopt;
  return StreamId{ms, seq};
}

Expected<ServerState> server_state(RedisConnection& redis, const StreamKeys& keys, const std::string& group,
                                   const std::vector<std::string>& held) {
  ServerState s;
  auto info = redis.command({"INFO", "server"});
  if (!info) return Error{info.error()};
  const std::string text = reply_text(info->get());
  if (const std::size_t at = text.find("run_id:"); at != std::string::npos) {
    s.run_id = text.substr(at + 7, text.find_first_of("\r\n", at) - at - 7);
  }
  if (s.run_id.empty()) return malformed(redis, "INFO server (no run_id)");
  // Where a stream ends now: its last-generated-id ("" when it is missing).
  auto last_of = [&](const std::string& key, std::string& last) -> Status {
    auto type = redis.command({"TYPE", key});
    if (!type) return Status::error(type.error());
    if (reply_text(type->get()) != "stream") return Status::ok();
    auto stream = redis.command({"XINFO", "STREAM", key});
    if (!stream) return Status::error(stream.error());
    last = info_field(stream->get(), "last-generated-id");
    return Status::ok();
  };
  std::string stream_last;
  if (auto st = last_of(keys.stream, stream_last); !st) return Error{st.message()};
  s.stream_exists = !stream_last.empty();
  if (auto st = last_of(keys.results, s.results_last); !st) return Error{st.message()};
  if (auto st = last_of(keys.dlq, s.dlq_last); !st) return Error{st.message()};
  if (s.stream_exists) {
    auto groups = redis.command({"XINFO", "GROUPS", keys.stream});
    if (!groups) return Error{groups.error()};
    s.group_exists = group_info(groups->get(), group) != nullptr;
  }
  for (const std::string& id : held) {
    if (!s.stream_exists) {
      s.held_gone.push_back(id);
      continue;
    }
    auto found = redis.command({"XRANGE", keys.stream, id, id});
    if (!found) return Error{found.error()};
    if ((*found)->type != REDIS_REPLY_ARRAY || (*found)->elements == 0) s.held_gone.push_back(id);
  }
  return s;
}

std::string group_ahead_of_stream(RedisConnection& redis, const StreamKeys& keys, const std::string& group) {
  auto stream = redis.command({"XINFO", "STREAM", keys.stream});
  auto groups = redis.command({"XINFO", "GROUPS", keys.stream});
  if (!stream || !groups || (*groups)->type != REDIS_REPLY_ARRAY) return "";
  const redisReply* g = group_info(groups->get(), group);
  if (g == nullptr) return "";
  const std::string last = info_field(stream->get(), "last-generated-id");
  const std::string delivered = info_field(g, "last-delivered-id");
  const auto a = stream_id(delivered), b = stream_id(last);
  if (!a || !b || *a <= *b) return "";
  return "the consumer group '" + group + "' of the stream '" + keys.stream + "' on " + redis.address().describe() +
         " was set to have read up to " + delivered + ", beyond the stream's last entry " + last +
         ": entries added before that id is reached are never delivered to it (XGROUP SETID fixes it)";
}

Expected<std::vector<Delivery>> read_new(RedisConnection& redis, const StreamKeys& keys, const Consumer& consumer,
                                         std::size_t count, std::chrono::milliseconds block) {
  const std::string n = std::to_string(count == 0 ? 1 : count);
  const std::string b = ms_text(block);
  std::vector<std::string_view> args = {"XREADGROUP", "GROUP", consumer.group, consumer.name, "COUNT", n};
  if (block.count() > 0) args.insert(args.end(), {"BLOCK", b});
  args.insert(args.end(), {"STREAMS", keys.stream, ">"});
  auto r = redis.command(args);
  if (!r) return explained(redis, keys, consumer.group, r.error());
  std::vector<Delivery> out;
  const redisReply* top = r->get();
  if (top->type == REDIS_REPLY_NIL) return out;  // nothing new within `block`
  if (top->type != REDIS_REPLY_ARRAY) return malformed(redis, "XREADGROUP");
  for (std::size_t s = 0; s < top->elements; ++s) {
    const redisReply* stream = top->element[s];
    if (stream->type != REDIS_REPLY_ARRAY || stream->elements != 2) return malformed(redis, "XREADGROUP");
    for (StreamEntry& e : stream_entries(stream->element[1], 2)) {
      Delivery d;
      d.entry = std::move(e.id);
      d.fields = std::move(e.fields);
      d.count = 1;  // never delivered before: '>' reads only those
      out.push_back(std::move(d));
    }
  }
  return out;
}

Expected<Claimed> claim_idle(RedisConnection& redis, const StreamKeys& keys, const Consumer& consumer,
                             std::chrono::milliseconds min_idle, const std::string& start, std::size_t count) {
  const std::string idle = ms_text(min_idle);
  const std::string n = std::to_string(count == 0 ? 1 : count);
  auto r = eval(redis, kClaimBody, {keys.stream}, {consumer.group, consumer.name, idle, start, n, keys.history_prefix});
  if (!r) return explained(redis, keys, consumer.group, r.error());
  const redisReply* top = r->get();
  if (top->type != REDIS_REPLY_ARRAY || top->elements != 2) return malformed(redis, "the claim script");
  Claimed c;
  c.next_start = reply_text(top->element[0]);
  for (StreamEntry& e : stream_entries(top->element[1], 4)) {
    Delivery d;
    d.entry = std::move(e.id);
    d.fields = std::move(e.fields);
    d.count = reply_integer(e.reply->element[2], 1);
    read_history(e.reply->element[3], d);
    c.deliveries.push_back(std::move(d));
  }
  return c;
}

Expected<Recorded> record_delivery(RedisConnection& redis, const StreamKeys& keys, const Consumer& consumer,
                                   const std::string& entry, std::int64_t delivery, const std::string& outcome_json) {
  const std::string d = std::to_string(delivery);
  const std::string ttl = std::to_string(std::chrono::duration_cast<std::chrono::milliseconds>(kHistoryTtl).count());
  const std::string history = keys.history(entry);
  auto r = eval(redis, kRecordBody, {keys.stream, history}, {consumer.group, consumer.name, entry, d, outcome_json, ttl});
  if (!r) return explained(redis, keys, consumer.group, r.error());
  Recorded out;
  if ((*r)->type == REDIS_REPLY_STRING) {
    out.history_type = reply_text(r->get());
  } else {
    out.held = reply_integer(r->get(), 0) == 1;
  }
  return out;
}

Expected<std::optional<Delivery>> redeliver(RedisConnection& redis, const StreamKeys& keys, const Consumer& consumer,
                                            const std::string& entry) {
  const std::string history = keys.history(entry);
  auto r = eval(redis, kRedeliverBody, {keys.stream, history}, {consumer.group, consumer.name, entry});
  if (!r) return explained(redis, keys, consumer.group, r.error());
  const redisReply* top = r->get();
  if (top->type != REDIS_REPLY_ARRAY) return malformed(redis, "the redeliver script");
  if (top->elements < 2) return std::optional<Delivery>{};
  Delivery out;
  out.entry = entry;
  out.count = reply_integer(top->element[0], 1);
  read_history(top->element[1], out);
  return std::optional<Delivery>(std::move(out));
}

Expected<std::optional<std::string>> settle(RedisConnection& redis, const StreamKeys& keys, const Consumer& consumer,
                                            const std::string& entry, const std::string& target, std::size_t maxlen,
                                            const EntryFields& fields) {
  const std::string cap = std::to_string(maxlen);
  const std::string history = keys.history(entry);
  std::vector<std::string_view> argv = {consumer.group, consumer.name, entry, target.empty() ? "0" : "1", cap};
  for (const auto& [k, v] : fields) argv.insert(argv.end(), {k, v});
  auto r = eval(redis, kSettleBody, {keys.stream, target.empty() ? std::string_view(keys.stream) : target, history}, argv);
  if (!r) return explained(redis, keys, consumer.group, r.error(), target);
  const redisReply* top = r->get();
  if (top->type != REDIS_REPLY_ARRAY) return malformed(redis, "the settle script");
  if (top->elements == 0) return std::optional<std::string>{};
  return std::optional<std::string>(reply_text(top->element[0]));
}

std::string why_not_held(RedisConnection& redis, const StreamKeys& keys, const Consumer& consumer,
                         const std::string& entry) {
  auto p = redis.command({"XPENDING", keys.stream, consumer.group, entry, entry, "1"});
  if (!p) return "no longer held by this worker";
  const redisReply* top = p->get();
  if (top->type == REDIS_REPLY_ARRAY && top->elements > 0 && top->element[0]->type == REDIS_REPLY_ARRAY &&
      top->element[0]->elements >= 4) {
    const redisReply* e = top->element[0];
    if (reply_text(e->element[1]) != consumer.name) {
      return "taken over by another consumer of the group (this one held it longer than --claim-idle, or it was "
             "claimed by hand)";
    }
    // Pending on this worker again: it was not when the step ran.
    return "claimed back by this worker meanwhile (delivery count " + std::to_string(reply_integer(e->element[3], 0)) +
           ")";
  }
  auto x = redis.command({"XRANGE", keys.stream, entry, entry});
  if (x && (*x)->type == REDIS_REPLY_ARRAY && (*x)->elements > 0) {
    return "acknowledged by someone else (XACK) while this worker held it";
  }
  return "no longer in the stream: deleted (XDEL, or trimmed by MAXLEN), or settled by a worker that took it over";
}

Expected<std::vector<std::string>> renew(RedisConnection& redis, const StreamKeys& keys, const Consumer& consumer,
                                         const std::vector<std::string>& held) {
  std::vector<std::string> lost;
  if (held.empty()) return lost;
  std::vector<std::string_view> argv = {consumer.group, consumer.name};
  for (const auto& id : held) argv.push_back(id);
  auto r = eval(redis, kRenewBody, {keys.stream}, argv);
  if (!r) return Error{r.error()};
  const redisReply* top = r->get();
  if (top->type != REDIS_REPLY_ARRAY) return malformed(redis, "the renew script");
  for (std::size_t i = 0; i < top->elements; ++i) lost.push_back(reply_text(top->element[i]));
  return lost;
}

}  // namespace pillbox::broker
