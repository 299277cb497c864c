#include "supervisor/broker/stream_entry.h"

#include <algorithm>
#include <limits>
#include <nlohmann/json.hpp>
#include <set>

#include "shared/base64.h"
#include "shared/fingerprint.h"
#include "shared/sha256.h"
#include "supervisor/store/quarantine_entry.h"
#include "supervisor/store/quarantine_json.h"

namespace pillbox::broker {
namespace {

// A field the worker reads given more than once (a stream entry may repeat
// a field name): which one is meant is a guess, and whoever reads the entry
// later may guess otherwise (a map keeps the last) and believe another
// payload ran. What it says, or "".
std::string repeated_field(const Delivery& d) {
  for (const std::string_view name : {"key", "payload", "redrive_of"}) {
    const auto n = std::count_if(d.fields.begin(), d.fields.end(), [&](const auto& f) { return f.first == name; });
    if (n > 1) return "stream entry " + d.entry + " has " + std::to_string(n) + " `" + std::string(name) + "` fields";
  }
  return "";
}

// "its fields: a, b" (the first 10 names, each cut at 64 bytes), or "it has
// no fields": what a malformed entry held, for its dead letter's message.
std::string fields_it_has(const Delivery& d) {
  if (d.fields.empty()) return "it has no fields";
  std::string names;
  std::size_t shown = 0;
  for (const auto& [name, value] : d.fields) {
    if (shown++ == 10) {
      names += ", ... (" + std::to_string(d.fields.size()) + " in all)";
      break;
    }
    names += (names.empty() ? "" : ", ") + name.substr(0, 64);
  }
  return "its fields: " + names;
}


Outcome count_out_of_range(const std::string& entry, std::int64_t delivery, const std::string& handler_identity) {
  return protocol_error("stream entry " + entry + " is at delivery count " + std::to_string(delivery) +
                            ", not within 1.." + std::to_string(kMaxDeliveries) +
                            ": set by hand (XCLAIM ... RETRYCOUNT), not by deliveries; its history is not read",
                        handler_identity);
}

}  // namespace

bool judgeable(std::int64_t delivery) { return delivery >= 1 && delivery <= kMaxDeliveries; }

Outcome protocol_error(const std::string& message, const std::string& handler_identity) {
  Outcome o;
  o.kind = Kind::kProtocolError;
  o.message = message;
  o.fingerprint = make_fingerprint(o.kind, "malformed-entry", {}, handler_identity);
  return o;
}

Outcome workers_lost(std::size_t lost, const std::string& handler_identity, std::string_view how) {
  Outcome o;
  o.kind = Kind::kSupervisorLost;
  o.message = "delivered " + std::to_string(lost) + " times to workers that never reported back (" + std::string(how) + ")";
  o.fingerprint = make_fingerprint(o.kind, "", {}, handler_identity);
  return o;
}

std::optional<Refused> oversized(const std::string& what, std::size_t size, std::size_t limit,
                                 const std::string& handler_identity) {
  if (size <= limit) return std::nullopt;
  return Refused{protocol_error(what + " of " + std::to_string(size) + " bytes is over the limit of " +
                                    std::to_string(limit) + " bytes (the worker's --max-" + what + ")",
                                handler_identity),
                 "oversized " + what + ": not run"};
}

bool kills_workers(const WorkerSettings& settings, const HeldEntry& e) {
  return settings.retry.max_attempts > 0 && e.history.lost.size() >= settings.retry.max_attempts;
}

// Dead-lettered (the settle deletes that key) rather than failing the
// script: that error would stop every worker that claims the entry.
Refused history_not_readable(const WorkerSettings& settings, const std::string& entry, const std::string& type,
                             const std::string& reason) {
  return {protocol_error("the history of stream entry " + entry + " (key " + settings.keys.history(entry) +
                             ") holds a " + type + ", not a hash: not written by pillbox, its deliveries cannot be judged",
                         settings.identity.handler_identity),
          reason};
}

void read_entry(const Delivery& d, HeldEntry& e) {
  e.id = d.entry;
  e.delivery = d.count;
  // The history is read delivery by delivery: only at a count deliveries reach.
  if (judgeable(d.count)) e.history = entry_history(static_cast<std::uint32_t>(d.count), d.history);
  const std::string* key = entry_field(d.fields, "key");
  e.task.key = key != nullptr ? *key : "entry:" + d.entry;
  if (const std::string* r = entry_field(d.fields, "redrive_of")) e.redrive_of = *r;
}

std::optional<Refused> check_entry(const WorkerSettings& settings, Delivery& d, HeldEntry& e) {
  const std::string& handler = settings.identity.handler_identity;
  if (!judgeable(d.count)) return Refused{count_out_of_range(d.entry, d.count, handler), "delivery count out of range: not run"};
  if (!d.history_type.empty()) return history_not_readable(settings, d.entry, d.history_type, "history not readable: not run");
  std::string* payload = entry_field(d.fields, "payload");
  if (const std::string repeated = repeated_field(d); !repeated.empty()) {
    // Nothing of it is lost: the first payload is the dead letter's, the
    // other values go with it.
    if (payload != nullptr) e.task.payload = *payload;
    std::set<std::string_view> seen;
    for (const auto& [name, value] : d.fields) {
      if (name != "key" && name != "payload" && name != "redrive_of") continue;
      if (!seen.insert(name).second) e.also_held.emplace_back("repeated:" + name, value);
    }
    return Refused{protocol_error(repeated + ": which one is meant is ambiguous", handler), "malformed entry: not run"};
  }
  if (payload == nullptr) {
    return Refused{protocol_error("stream entry " + d.entry + " has no `payload` field (" + fields_it_has(d) +
                                      "; a task entry has `key` and `payload`, as pillbox submit writes them)",
                                  handler),
                   "malformed entry: not run"};
  }
  e.task.payload = std::move(*payload);
  if (auto refused = oversized("payload", e.task.payload.size(), settings.max_payload, handler)) return refused;
  if (auto refused = oversized("key", e.task.key.size(), settings.max_key, handler)) return refused;
  if (kills_workers(settings, e)) {
    return Refused{workers_lost(e.history.lost.size(), handler),
                   std::to_string(e.history.lost.size()) + " deliveries never reported back: it kills workers; not run again",
                   false};
  }
  return std::nullopt;
}

std::optional<Refused> check_redelivery(const WorkerSettings& settings, const Delivery& d, HeldEntry& e) {
  const std::string& handler = settings.identity.handler_identity;
  e.delivery = d.count;
  if (!judgeable(e.delivery)) {
    e.history = EntryHistory{};
    return Refused{count_out_of_range(e.id, e.delivery, handler), "delivery count out of range: not run again"};
  }
  e.history = entry_history(static_cast<std::uint32_t>(e.delivery), d.history);
  if (!d.history_type.empty()) return history_not_readable(settings, e.id, d.history_type, "history not readable: not run again");
  return std::nullopt;
}

std::optional<Refused> lost_too_often(const WorkerSettings& settings, const HeldEntry& e) {
  if (!kills_workers(settings, e)) return std::nullopt;
  return Refused{workers_lost(e.history.lost.size(), settings.identity.handler_identity),
                 "deliveries never reported back: it kills workers", false};
}

EntryFields result_fields(const WorkerSettings& settings, const HeldEntry& e, const Outcome& outcome) {
  EntryFields fields;
  if (!settings.results) return fields;
  fields = {{"key", e.task.key},    {"verdict", "ok"},
            {"status", "ok"},       {"kind", "ok"},
            {"entry", e.id},        {"deliveries", std::to_string(e.delivery)},
            {"attempts", std::to_string(e.delivery)}, {"worker", settings.consumer.name}};
  if (outcome.exit_code >= 0) fields.emplace_back("exit_code", std::to_string(outcome.exit_code));
  if (!outcome.message.empty()) fields.emplace_back("message", outcome.message);
  if (outcome.output.size() > settings.results_max_output) {
    // A flood of large outputs must not fill Redis's memory: the result
    // says what it was, not what it held.
    fields.emplace_back("output_omitted", output_omitted_reason(settings, outcome));
    fields.emplace_back("output_size", std::to_string(outcome.output.size()));
    fields.emplace_back("output_sha256", sha256_hex(outcome.output));
  } else if (is_valid_utf8(outcome.output)) {
    fields.emplace_back("output", outcome.output);
  } else {
    fields.emplace_back("output_b64", base64_encode(outcome.output));
  }
  fields.emplace_back("cpu_ms", std::to_string(outcome.cpu_ms));
  fields.emplace_back("wall_ms", std::to_string(outcome.wall_ms));
  fields.emplace_back("max_rss_kb", std::to_string(outcome.max_rss_kb));
  if (!e.redrive_of.empty()) fields.emplace_back("redrive_of", e.redrive_of);
  return fields;
}

std::string output_omitted_reason(const WorkerSettings& settings, const Outcome& outcome) {
  if (outcome.output.size() <= settings.results_max_output) return "";
  return "too large: " + std::to_string(outcome.output.size()) + " bytes, over --results-max-output " +
         std::to_string(settings.results_max_output);
}

std::string dead_letter_record(const WorkerSettings& settings, const HeldEntry& e, const Outcome& outcome,
                               const std::string& reason, std::int64_t now_ms) {
  return dead_letter_record(settings, e, outcome, reason, now_ms, "stream",
                            {{"name", settings.keys.stream}, {"group", settings.consumer.group}, {"entry", e.id}});
}

std::string dead_letter_record(const WorkerSettings& settings, const HeldEntry& e, const Outcome& outcome,
                               const std::string& reason, std::int64_t now_ms, const std::string& source_field,
                               const nlohmann::json& source) {
  store::QuarantineRecord r;
  r.entry = make_quarantine_entry(settings.identity, outcome, e.task.key, sha256_hex(e.task.payload),
                                  static_cast<std::int64_t>(e.task.payload.size()), "worker");
  r.created_at = r.updated_at = now_ms;
  const auto attempts_made = judgeable(e.delivery) ? static_cast<std::uint32_t>(e.delivery) : 0u;
  auto j = nlohmann::json::parse(quarantine_record_json(r, attempts_made, false, ""), nullptr, false);
  if (j.is_discarded()) j = nlohmann::json::object();
  j.erase("id");  // the dead-letter entry's id is the record's
  j.erase("new_fingerprint");
  j["policy"] = settings.identity.policy;
  j["reason"] = reason;
  j[source_field] = source;
  j["deliveries"] = e.delivery;
  // base64: a stderr tail need not be UTF-8.
  if (!r.entry.stderr_tail.empty()) j["stderr_tail_b64"] = base64_encode(r.entry.stderr_tail);
  nlohmann::json attempts = nlohmann::json::array();
  // The deliveries before this one, recorded, lost or never started, in
  // order: a merge of the three lists, never a walk up to the count (Redis
  // may say anything).
  const auto& recorded = e.history.recorded;
  const auto& lost = e.history.lost;
  const auto& unstarted = e.history.unstarted;
  std::size_t r_i = 0, l_i = 0, u_i = 0;
  constexpr std::int64_t kNone = std::numeric_limits<std::int64_t>::max();
  for (;;) {
    const std::int64_t r = r_i < recorded.size() ? recorded[r_i].delivery : kNone;
    const std::int64_t l = l_i < lost.size() ? lost[l_i] : kNone;
    const std::int64_t u = u_i < unstarted.size() ? unstarted[u_i] : kNone;
    const std::int64_t n = std::min({r, l, u});
    if (n == kNone || n >= e.delivery) break;
    if (n == r) {
      attempts.push_back(nlohmann::json::parse(delivery_json(recorded[r_i++])));
    } else if (n == l) {
      nlohmann::json a = {{"delivery", lost[l_i]}, {"kind", "supervisor-lost"}, {"note", "never reported back"}};
      // A suspect's began on a known worker at a known time: its worker
      // died with it (or lost Redis), which is worth naming.
      const auto& starts = e.history.lost_starts;
      const auto start = std::find_if(starts.begin(), starts.end(),
                                      [&](const RecordedDelivery& d) { return d.delivery == lost[l_i]; });
      if (start != starts.end()) {
        a["worker"] = start->worker;
        a["at_ms"] = start->at_ms;
        a["note"] = "began to run and never reported back";
      }
      ++l_i;
      attempts.push_back(std::move(a));
    } else {
      attempts.push_back(
          {{"delivery", unstarted[u_i++]}, {"kind", ""}, {"note", "never started: its worker died while it waited"}});
    }
  }
  if (outcome.kind != Kind::kSupervisorLost && outcome.kind != Kind::kProtocolError) {
    attempts.push_back(nlohmann::json::parse(
        delivery_json(recorded_outcome(e.delivery, settings.consumer.name, now_ms, outcome, true, false))));
  }
  j["attempts_history"] = attempts;
  return j.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
}

EntryFields dead_letter_fields(const WorkerSettings& settings, const HeldEntry& e, const Outcome& outcome,
                               const std::string& reason, std::int64_t now_ms) {
  EntryFields fields = {
      {"key", e.task.key},
      {"payload", e.task.payload},
      {"kind", std::string(to_string(outcome.kind))},
      {"fingerprint", outcome.fingerprint},
      {"deliveries", std::to_string(e.delivery)},
      {"entry", e.id},
      {"record", dead_letter_record(settings, e, outcome, reason, now_ms)},
  };
  // A redriven dead letter that fails again says which one it was.
  if (!e.redrive_of.empty()) fields.emplace_back("redrive_of", e.redrive_of);
  fields.insert(fields.end(), e.also_held.begin(), e.also_held.end());
  if (settings.fleet_key) fields.emplace_back("sig", settings.fleet_key->sign(settings.keys.dlq, fields));
  return fields;
}

std::string_view to_string(WorkerVerdict::Type type) {
  switch (type) {
    case WorkerVerdict::Type::kOk: return "ok";
    case WorkerVerdict::Type::kDeadLettered: return "dead-lettered";
    case WorkerVerdict::Type::kReleased: return "released";
    case WorkerVerdict::Type::kTakenOver: return "taken-over";
  }
  return "unknown";
}

}  // namespace pillbox::broker
