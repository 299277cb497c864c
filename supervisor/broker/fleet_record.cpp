#include "supervisor/broker/fleet_record.h"

#include <charconv>
#include <nlohmann/json.hpp>

#include "shared/base64.h"
#include "shared/child_streams.h"
#include "shared/sha256.h"
#include "supervisor/classify/outcome_json.h"
#include "supervisor/io/terminal_text.h"
#include "supervisor/io/untrusted_json.h"

namespace pillbox::broker {
namespace {

using nlohmann::json;

// A worker's record is a few KiB (its stderr tail is at most 8 KiB); a
// longer `record` field was not written by one.
constexpr std::size_t kMaxRecordBytes = 1 << 20;

std::string text_of(const json& j, const char* name, const std::string& fallback = "") {
  if (!j.contains(name) || !j[name].is_string()) return fallback;
  return j[name].get<std::string>();
}

// A whole number that fits (json_whole_number); anything else is `fallback`.
std::int64_t number_of(const json& j, const char* name, std::int64_t fallback) {
  const auto it = j.find(name);
  return it == j.end() ? fallback : json_whole_number(*it).value_or(fallback);
}

// A field quarantine_record_json wrote parsed (handler_args, exec_argv,
// crash_state, origin) back to the text the store keeps.
std::string json_text_of(const json& j, const char* name, const std::string& fallback) {
  if (!j.contains(name)) return fallback;
  if (j[name].is_string()) return j[name].get<std::string>();
  return j[name].dump(-1, ' ', false, json::error_handler_t::replace);
}

std::uint32_t to_u32(const std::string& text) {
  std::uint32_t n = 0;
  std::from_chars(text.data(), text.data() + text.size(), n);
  return n;
}

// An element of the record's attempts_history: a delivery as
// delivery_json wrote it (supervisor/broker/delivery_history.h), or one that
// never reported back ({"delivery", "kind": "supervisor-lost", "note"}).
FleetAttempt delivery_attempt(const json& d) {
  FleetAttempt a;
  const auto n = number_of(d, "delivery", 0);  // a claim, as every field here
  a.n = n > 0 && n <= 0xffffffffLL ? static_cast<std::uint32_t>(n) : 0;
  a.worker = text_of(d, "worker");
  a.ended_at = number_of(d, "at_ms", 0);
  a.kind = text_of(d, "kind");
  a.fingerprint = text_of(d, "fingerprint");
  const std::string note = text_of(d, "note");
  a.message = text_of(d, "message");
  if (a.message.empty()) a.message = note;
  a.charged = d.contains("charged") && d["charged"].is_boolean() ? d["charged"].get<bool>() : a.ended_at != 0;
  return a;
}

}  // namespace

std::int64_t entry_time_ms(std::string_view id) {
  std::int64_t ms = 0;
  const auto [end, ec] = std::from_chars(id.data(), id.data() + id.size(), ms);
  if (ec != std::errc() || end == id.data() || (end != id.data() + id.size() && *end != '-')) return 0;
  return ms;
}

void read_worker_record(const nlohmann::json& j, const DeadLetterClaims& own, std::string unreadable,
                        FleetRecord& out) {
  store::QuarantineEntry& e = out.record.entry;
  e.key = text_of(j, "key", own.key);
  e.source = text_of(j, "source", "worker");
  e.handler = text_of(j, "handler");
  e.handler_identity = text_of(j, "handler_identity");
  e.handler_args = json_text_of(j, "handler_args", "{}");
  e.exec_argv = json_text_of(j, "exec_argv", "[]");
  e.working_dir = text_of(j, "working_dir");
  e.policy_identity = text_of(j, "policy_identity");
  e.policy = text_of(j, "policy");
  e.payload_sha256 = text_of(j, "payload_sha256", own.payload_sha256);
  e.payload_size = number_of(j, "payload_size", own.payload_size);
  {
    // The outcome as the record says it, each field for what it still says
    // (not strict); kind and fingerprint fall back to the dead letter's own,
    // and the message to why the record could not be read.
    static_cast<OutcomeRecord&>(e) = *read_outcome_record(j, /*strict=*/false);
    if (!j.contains("kind") || !j["kind"].is_string()) e.kind = own.kind;
    if (!j.contains("fingerprint") || !j["fingerprint"].is_string()) e.fingerprint = own.fingerprint;
    if (!j.contains("message")) e.message = std::move(unreadable);
  }
  if (j.contains("origin")) e.origin = json_text_of(j, "origin", "");
  // A claim like every field here: kept only when it decodes, and no longer
  // than the tail a worker keeps (a forged one is cut, never trusted to be small).
  if (auto tail = base64_decode(text_of(j, "stderr_tail_b64")); tail && !tail->empty()) {
    e.stderr_tail = tail->size() > kStderrTailBytes ? tail->substr(tail->size() - kStderrTailBytes) : std::move(*tail);
  }
  {
    // A claim: below 0 or past 2^32 is none (stats adds them up).
    const auto repeats = number_of(j, "repeats", 0);
    out.record.repeats = repeats > 0 && repeats <= 0xffffffffLL ? repeats : 0;
  }

  out.reason = text_of(j, "reason");
  if (out.deliveries == 0) {
    // A claim: a count below 0 or past 2^32 is none.
    const auto claimed = number_of(j, "deliveries", 0);
    out.deliveries = claimed > 0 && claimed <= 0xffffffffLL ? static_cast<std::uint32_t>(claimed) : 0;
  }
  if (j.contains("attempts_history") && j["attempts_history"].is_array()) {
    for (const auto& d : j["attempts_history"]) {
      if (d.is_object()) out.attempts.push_back(delivery_attempt(d));
    }
  }
}

FleetRecord parse_dead_letter(const std::string& id, const EntryFields& fields,
                              std::optional<std::int64_t> omitted_payload_size) {
  FleetRecord out;
  out.id = id;
  auto field = [&](std::string_view name) { return field_or_empty(fields, name); };
  out.payload = field("payload");
  out.payload_omitted = omitted_payload_size.has_value();
  out.redrive_of = field("redrive_of");
  out.source_entry = field("entry");
  out.deliveries = to_u32(field("deliveries"));

  store::QuarantineRecord& r = out.record;
  r.created_at = r.updated_at = entry_time_ms(id);
  const std::string* record_field = entry_field(fields, "record");
  UntrustedJson parsed = parse_untrusted_json(record_field != nullptr ? *record_field : "", kMaxRecordBytes);
  json j = std::move(parsed.value);
  std::string unreadable;
  if (j.is_discarded() || !j.is_object()) {
    j = json::object();
    const std::string why = record_field == nullptr  ? "it has none"
                            : !parsed.why_not.empty() ? parsed.why_not
                                                      : "it is not a JSON object";
    unreadable = "the dead letter has no readable `record` field (" + why +
                 "): only its key, kind, fingerprint and payload are known";
  }
  const DeadLetterClaims own{
      .key = field("key"),
      .kind = field("kind"),
      .fingerprint = field("fingerprint"),
      .payload_sha256 = out.payload_omitted ? "" : sha256_hex(out.payload),
      .payload_size = omitted_payload_size.value_or(static_cast<std::int64_t>(out.payload.size()))};
  read_worker_record(j, own, std::move(unreadable), out);
  if (j.contains("stream") && j["stream"].is_object()) {
    out.stream = text_of(j["stream"], "name");
    out.group = text_of(j["stream"], "group");
    if (out.source_entry.empty()) out.source_entry = text_of(j["stream"], "entry");
  }
  return out;
}

void apply_state(FleetRecord& fr, FleetState state, const std::string& lock_holder) {
  const bool locked = !lock_holder.empty();
  store::QuarantineRecord& r = fr.record;
  r.status = locked ? store::RecordStatus::kReplaying : state.status;
  if (state.updated_at > r.updated_at) r.updated_at = state.updated_at;
  r.reproduce_verdict = state.reproduce_verdict;
  r.reproduce_runs = state.reproduce_runs;
  r.reproduce_matches = state.reproduce_matches;
  r.minimized_sha256 = state.minimized_sha256;
  fr.state = std::move(state);
  fr.replaying = locked;
  // A claim (a lock's value, a lease in a state log anyone who may write
  // to it can forge) that goes into messages on a terminal ("being
  // replayed right now by ..."): an escape in it stays out.
  fr.replaying_by = table_cell(lock_holder, 200);
}

Expected<std::string> checked_payload(const FleetRecord& r) {
  if (r.payload_omitted) {
    return Error{"the payload of record " + r.id + " was not read (" +
                 (r.payload_omitted_why.empty() ? std::string("a listing leaves it out") : r.payload_omitted_why) + ")"};
  }
  if (sha256_hex(r.payload) != r.record.entry.payload_sha256) {
    // The sha256 is the record's claim: shown as a table cell (an escape
    // in it reached the terminal through show's and export's errors).
    return Error{"the payload of record " + r.id + " does not match the sha256 its record names (" +
                 table_cell(r.record.entry.payload_sha256, 80) + ")"};
  }
  return r.payload;
}

Outcome result_outcome(const EntryFields& fields) {
  Outcome o;
  o.kind = Kind::kOk;
  if (const std::string* out = entry_field(fields, "output")) {
    o.output = *out;
  } else if (const std::string* b64 = entry_field(fields, "output_b64")) {
    o.output = base64_decode(*b64).value_or("");
  }
  auto number = [&](std::string_view name) {
    const std::string* v = entry_field(fields, name);
    std::uint64_t n = 0;
    if (v != nullptr) std::from_chars(v->data(), v->data() + v->size(), n);
    return n;
  };
  o.cpu_ms = number("cpu_ms");
  o.wall_ms = number("wall_ms");
  o.max_rss_kb = number("max_rss_kb");
  return o;
}

Status check_signed(const FleetRecord& r, bool trust_unsigned) {
  if (trust_unsigned || r.signature == Signature::kValid) return Status::ok();
  const std::string anyway = "; --trust-unsigned runs it anyway (under this machine's policy for it)";
  switch (r.signature) {
    case Signature::kUnchecked:
      return Status::error("record " + r.id + "'s signature was not checked: give the fleet's key (--fleet-key FILE, "
                           "or PILLBOX_FLEET_KEY=FILE), the one its workers sign dead letters with" + anyway);
    case Signature::kMissing:
      return Status::error("record " + r.id + " is unsigned: written by a worker without --fleet-key, or by anyone "
                           "who can write to this broker; an unsigned dead letter is never run on its word" + anyway);
    case Signature::kBad:
      return Status::error("record " + r.id + "'s signature does not match the fleet key: it was changed after its "
                           "worker signed it, or signed with another key; it is never run" + anyway);
    case Signature::kValid:
      break;
  }
  return Status::ok();
}

}  // namespace pillbox::broker
