#include "supervisor/broker/fleet_results.h"

#include <charconv>
#include <map>
#include <optional>
#include <string_view>
#include <vector>

#include "shared/base64.h"
#include "supervisor/broker/fleet_record.h"

namespace pillbox::broker {
namespace {

// Entries whose ids and keys one call of the script returns.
constexpr int kPage = 1000;

// A page of (id, key) pairs from `start` on; a key is nil for an entry
// without one. Only those cross the connection: an entry's output may be
// as large as Redis allows.
constexpr const char* kIdsAndKeys = R"lua(
local entries = redis.call('XRANGE', KEYS[1], ARGV[1], '+', 'COUNT', tonumber(ARGV[2]))
local out = {}
for _, e in ipairs(entries) do
  local key = false
  local f = e[2]
  for i = 1, #f - 1, 2 do
    if f[i] == 'key' then key = f[i + 1]; break end
  end
  out[#out + 1] = e[1]
  out[#out + 1] = key
end
return out
)lua";

// The largest id a stream entry can have: nothing comes after it, and
// "(" + it is not a valid start.
constexpr std::string_view kMaxId = "18446744073709551615-18446744073709551615";

struct IdAndKey {
  std::string id;
  std::optional<std::string> key;
};

// Every (id, key) of `stream`, oldest first, a page at a time.
Status each_id_and_key(RedisConnection& redis, const std::string& stream,
                       const std::function<void(const IdAndKey&)>& fn) {
  std::string start = "-";
  for (;;) {
    auto page = redis.command({"EVAL", kIdsAndKeys, "1", stream, start, std::to_string(kPage)});
    if (!page) return Status::error(page.error());
    const redisReply* top = page->get();
    if (top->type == REDIS_REPLY_ERROR) return Status::error(stream + ": " + reply_text(top));
    if (top->type != REDIS_REPLY_ARRAY || top->elements == 0) return Status::ok();
    std::string last;
    for (std::size_t i = 0; i + 1 < top->elements; i += 2) {
      IdAndKey e;
      e.id = last = reply_text(top->element[i]);
      const redisReply* key = top->element[i + 1];
      if (key->type == REDIS_REPLY_STRING) e.key = reply_text(key);
      fn(e);
    }
    if (top->elements < 2 * static_cast<std::size_t>(kPage) || last.empty() || last == kMaxId) return Status::ok();
    start = "(" + last;
  }
}

// One entry's fields; nullopt when it is gone (trimmed meanwhile).
Expected<std::optional<EntryFields>> entry_at(RedisConnection& redis, const std::string& stream, const std::string& id) {
  auto reply = redis.command({"XRANGE", stream, id, id});
  if (!reply) return Error{reply.error()};
  const redisReply* top = reply->get();
  if (top->type == REDIS_REPLY_ERROR) return Error{stream + ": " + reply_text(top)};
  // At most one entry has that id: a malformed one is none.
  auto entries = stream_entries(top, 2);
  if (entries.empty() || !entries[0].fields_listed) return std::optional<EntryFields>();
  return std::optional<EntryFields>(std::move(entries[0].fields));
}

// The result an entry says, checked field by field.
FleetResult read_result(const std::string& id, const EntryFields& fields) {
  FleetResult r;
  r.entry = id;
  r.key = field_or_empty(fields, "key");
  r.source_entry = field_or_empty(fields, "entry");
  r.redrive_of = field_or_empty(fields, "redrive_of");
  r.worker = field_or_empty(fields, "worker");
  r.at_ms = entry_time_ms(id);
  r.has_key = entry_field(fields, "key") != nullptr;
  if (!r.has_key) {
    r.why_not = "unreadable: the entry has no key (it was not written by a pillbox worker)";
    return r;
  }
  if (const std::string* out = entry_field(fields, "output")) {
    r.output = *out;
    r.size = static_cast<std::int64_t>(out->size());
  } else if (const std::string* b64 = entry_field(fields, "output_b64")) {
    if (auto bytes = base64_decode(*b64)) {
      r.size = static_cast<std::int64_t>(bytes->size());
      r.output = std::move(*bytes);
    } else {
      r.why_not = "unreadable: its output_b64 is not base64 (this entry was not written by a pillbox worker)";
    }
  } else if (const std::string* omitted = entry_field(fields, "output_omitted")) {
    const std::string size = field_or_empty(fields, "output_size");
    std::int64_t n = 0;
    const auto [end, ec] = std::from_chars(size.data(), size.data() + size.size(), n);
    if (ec == std::errc() && end == size.data() + size.size() && n >= 0) r.size = n;
    r.why_not = "not kept on Redis: " + *omitted;
  } else {
    r.why_not = "unreadable: the entry has no output field (this entry was not written by a pillbox worker)";
  }
  return r;
}

}  // namespace

Status each_newest_result(RedisConnection& redis, const std::string& results_key, const std::set<std::string>& keys,
                          const std::function<Status(const FleetResult&)>& fn) {
  auto type = redis.command({"TYPE", results_key});
  if (!type) return Status::error(type.error());
  const std::string what = reply_text(type->get());
  if (what == "none") return Status::ok();
  if (what != "stream") return Status::error(results_key + " is a " + what + ", not a stream of results");
  // 1. The newest entry of each key (ids grow: the later one wins), in
  // stream order, and the entries without a key.
  std::map<std::string, std::size_t> newest;      // key -> its place in `order`
  std::vector<std::optional<std::string>> order;  // entry ids, oldest first; nullopt: superseded
  auto s = each_id_and_key(redis, results_key, [&](const IdAndKey& e) {
    if (!e.key) {
      if (keys.empty()) order.emplace_back(e.id);
      return;
    }
    if (!keys.empty() && keys.count(*e.key) == 0) return;
    auto [at, added] = newest.try_emplace(*e.key, order.size());
    if (!added) {
      order[at->second].reset();
      at->second = order.size();
    }
    order.emplace_back(e.id);
  });
  if (!s) return s;
  // 2. Each of them alone, with its output. One trimmed meanwhile is not met.
  for (const auto& id : order) {
    if (!id) continue;
    auto fields = entry_at(redis, results_key, *id);
    if (!fields) return Status::error(fields.error());
    if (!*fields) continue;
    if (auto done = fn(read_result(*id, **fields)); !done) return done;
  }
  return Status::ok();
}

}  // namespace pillbox::broker
