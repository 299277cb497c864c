#include "supervisor/broker/fleet_results.h"

#include <charconv>
#include <map>
#include <vector>

#include "shared/base64.h"
#include "supervisor/broker/fleet_record.h"

namespace pillbox::broker {
namespace {

// Entries read per XRANGE.
constexpr int kPage = 500;

// Walks every entry of `stream`, oldest first, a page at a time.
Status each_entry(RedisConnection& redis, const std::string& stream,
                  const std::function<Status(const std::string& id, const EntryFields& fields)>& fn) {
  std::string start = "-";
  for (;;) {
    auto page = redis.command({"XRANGE", stream, start, "+", "COUNT", std::to_string(kPage)});
    if (!page) return Status::error(page.error());
    const redisReply* top = page->get();
    if (top->type == REDIS_REPLY_ERROR) return Status::error(stream + ": " + reply_text(top));
    if (top->type != REDIS_REPLY_ARRAY || top->elements == 0) return Status::ok();
    std::string last;
    for (std::size_t i = 0; i < top->elements; ++i) {
      const redisReply* e = top->element[i];
      if (e->type != REDIS_REPLY_ARRAY || e->elements != 2 || e->element[1]->type != REDIS_REPLY_ARRAY) continue;
      last = reply_text(e->element[0]);
      EntryFields fields;
      const redisReply* f = e->element[1];
      for (std::size_t k = 0; k + 1 < f->elements; k += 2) {
        fields.emplace_back(reply_text(f->element[k]), reply_text(f->element[k + 1]));
      }
      if (auto s = fn(last, fields); !s) return s;
    }
    if (top->elements < static_cast<std::size_t>(kPage) || last.empty()) return Status::ok();
    start = "(" + last;
  }
}

std::string field_or_empty(const EntryFields& fields, std::string_view name) {
  const std::string* v = entry_field(fields, name);
  return v != nullptr ? *v : std::string();
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
  if (entry_field(fields, "key") == nullptr) {
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
  // 1. The newest entry of each key: ids only, no outputs kept.
  std::map<std::string, std::string> newest;  // key -> entry id
  std::set<std::string> wanted;               // ... and entries without a key, told as such
  auto s = each_entry(redis, results_key, [&](const std::string& id, const EntryFields& fields) {
    const std::string* key = entry_field(fields, "key");
    if (key == nullptr) {
      if (keys.empty()) wanted.insert(id);
      return Status::ok();
    }
    if (!keys.empty() && keys.count(*key) == 0) return Status::ok();
    newest[*key] = id;  // ids grow: the later entry wins
    return Status::ok();
  });
  if (!s) return s;
  for (const auto& [key, id] : newest) wanted.insert(id);
  if (wanted.empty()) return Status::ok();
  // 2. Those entries again, in stream order, with their outputs. An entry
  // trimmed meanwhile is simply not met; one added is not newer than it was.
  return each_entry(redis, results_key, [&](const std::string& id, const EntryFields& fields) {
    if (wanted.count(id) == 0) return Status::ok();
    return fn(read_result(id, fields));
  });
}

}  // namespace pillbox::broker
