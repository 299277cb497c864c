#include "supervisor/broker/kafka_dead_letter.h"

#include <charconv>
#include <limits>
#include <utility>

#include "shared/base64.h"
#include "shared/child_streams.h"
#include "supervisor/broker/dead_letter_fit.h"
#include "supervisor/broker/delivery_history.h"
#include "supervisor/broker/kafka_record_fit.h"
#include "supervisor/io/untrusted_json.h"

namespace pillbox::broker {
namespace {

using nlohmann::json;

constexpr std::string_view kDedupe = "pillbox.dedupe";
constexpr std::string_view kSourceTopic = "pillbox.source.topic";
constexpr std::string_view kSourcePartition = "pillbox.source.partition";
constexpr std::string_view kSourceOffset = "pillbox.source.offset";
constexpr std::string_view kKind = "pillbox.kind";
constexpr std::string_view kFingerprint = "pillbox.fingerprint";
constexpr std::string_view kAttempts = "pillbox.attempts";
constexpr std::string_view kMessage = "pillbox.message";
constexpr std::string_view kReason = "pillbox.reason";
constexpr std::string_view kStderr = "pillbox.stderr";
constexpr std::string_view kHandler = "pillbox.handler";
constexpr std::string_view kPolicy = "pillbox.policy";
constexpr std::string_view kHeadersNote = "pillbox.headers";
// A dead letter too large for a record goes without the original's value
// (kafka_record_fit.h); these say so, and what the value was.
constexpr std::string_view kPayloadOmitted = "pillbox.payload_omitted";
constexpr std::string_view kPayloadSize = "pillbox.payload_size";
constexpr std::string_view kPayloadSha256 = "pillbox.payload_sha256";
// And, still too large, without the original's key (a key near the limit
// is refused unrun, and its dead letter must settle it all the same).
constexpr std::string_view kKeyOmitted = "pillbox.key_omitted";
constexpr std::string_view kKeySize = "pillbox.key_size";
constexpr std::string_view kKeySha256 = "pillbox.key_sha256";

// Longer than any context header pillbox writes (the stderr tail aside):
// a longer one was not written by a worker.
constexpr std::size_t kMaxContextText = kMaxRecordedMessage;
constexpr std::size_t kMaxHeadersNote = 1024;
// The worker's own record, before it is fitted: its message may be as long
// as the task's (cut in the record and its header).
constexpr std::size_t kMaxWorkerRecord = 16u << 20;

std::string dumped(const json& j) { return j.dump(-1, ' ', false, json::error_handler_t::replace); }

bool pillbox_named(std::string_view name) { return name.rfind("pillbox-", 0) == 0 || name.rfind("pillbox.", 0) == 0; }

std::string text_of(const json& j, const char* name) {
  const auto it = j.find(name);
  return it != j.end() && it->is_string() ? it->get<std::string>() : std::string();
}

std::optional<std::int64_t> number_of(const json& j, const char* name) {
  const auto it = j.find(name);
  return it == j.end() ? std::nullopt : json_whole_number(*it);
}

// A whole number written as pillbox writes one (decimal, no sign, no
// leading zero) within 0..max; nullopt for anything else.
std::optional<std::int64_t> canonical_number(std::string_view text, std::int64_t max) {
  if (text.empty() || text.size() > 19 || (text.size() > 1 && text[0] == '0')) return std::nullopt;
  std::int64_t n = 0;
  const auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), n);
  if (ec != std::errc() || end != text.data() + text.size() || n < 0 || n > max) return std::nullopt;
  return n;
}

void note(std::string& unreadable, const std::string& what) {
  unreadable += (unreadable.empty() ? "" : "; ") + what;
}

// The worker's record within kMaxKafkaRecordJson: fitted, and past that
// (a record that is not an object) said to be left out.
std::string bounded_record(const std::string& record) {
  std::string fitted = fitted_record(record, kMaxKafkaRecordJson, "a Kafka record (max.message.bytes)");
  if (fitted.size() <= kMaxKafkaRecordJson) return fitted;
  return dumped({{"omitted", "the record of " + std::to_string(fitted.size()) + " bytes, over the " +
                                 std::to_string(kMaxKafkaRecordJson) + " a Kafka dead letter's header may hold"}});
}

}  // namespace

KafkaHeaders kafka_source_headers(const KafkaMessage& original) {
  return {{std::string(kDedupe), kafka_source_key(original.topic, original.partition, original.offset)},
          {std::string(kSourceTopic), original.topic},
          {std::string(kSourcePartition), std::to_string(original.partition)},
          {std::string(kSourceOffset), std::to_string(original.offset)}};
}

nlohmann::json kafka_record_source(const KafkaMessage& original, const std::string& group) {
  return {{"name", original.topic},
          {"partition", original.partition},
          {"offset", original.offset},
          {"group", group},
          {"dedupe", kafka_source_key(original.topic, original.partition, original.offset)}};
}

namespace {

// The dead letter unsigned; with `omitted`, without the original's value,
// with `omitted_key` without its key, its record and headers saying so.
KafkaOutgoing unsigned_dead_letter(const KafkaMessage& original, const std::string& record,
                                   const OmittedValue* omitted, const OmittedValue* omitted_key) {
  KafkaOutgoing out;
  out.topic = kafka_dlq_topic(original.topic);
  out.partition = original.partition;
  out.key = omitted_key != nullptr ? std::nullopt : original.key;
  out.value = original.value;

  // The original's headers, in order, while they fit; one named like
  // pillbox's goes on renamed (a producer to T does not write pillbox's).
  std::size_t carried_bytes = 0;
  std::int64_t carried = 0, renamed = 0, dropped = 0;
  std::uint64_t dropped_bytes = 0;
  for (const auto& [name, value] : original.headers) {
    const bool forged = pillbox_named(name);
    std::string as = forged ? std::string(kRenamedHeaderPrefix) + name : name;
    const std::size_t size = as.size() + (value ? value->size() : 0);
    if (dropped > 0 || carried_bytes + size > kMaxKafkaCarriedHeaders) {
      ++dropped;
      dropped_bytes += size;
      continue;
    }
    carried_bytes += size;
    ++carried;
    renamed += forged ? 1 : 0;
    out.headers.emplace_back(std::move(as), value);
  }

  // The context headers from the record as the worker wrote it, each
  // bounded on its own: what fitting cut from the record (its stderr
  // tail first) is still said there.
  json j = parse_untrusted_json(record, kMaxWorkerRecord).value;
  if (!j.is_object()) j = json::object();
  std::string text;
  if (omitted != nullptr || omitted_key != nullptr) {
    // The record says it too: a reader of the record alone (quarantine
    // show --json) is not left to find an empty value and wonder.
    const std::string where = "the original is in " + original.topic + " partition " +
                              std::to_string(original.partition) + " at offset " + std::to_string(original.offset) +
                              " while its retention keeps it";
    json said = j;
    if (omitted != nullptr) {
      said["payload_omitted"] = true;
      said["payload_omitted_why"] = omitted->why + "; " + where;
      said["payload_size"] = omitted->size;
      said["payload_sha256"] = omitted->sha256;
      out.value = std::string();
    }
    if (omitted_key != nullptr) {
      said["key_omitted"] = true;
      said["key_omitted_why"] = omitted_key->why + "; " + where;
      said["key_size"] = omitted_key->size;
      said["key_sha256"] = omitted_key->sha256;
    }
    text = bounded_record(dumped(said));
  } else {
    text = bounded_record(record);
  }
  auto add = [&](std::string_view name, std::string value) { out.headers.emplace_back(std::string(name), std::move(value)); };
  auto add_if = [&](std::string_view name, std::string value) {
    if (!value.empty()) add(name, std::move(value));
  };
  add(kRecordHeader, text);
  for (auto& h : kafka_source_headers(original)) out.headers.push_back(std::move(h));
  add_if(kKind, text_of(j, "kind"));
  add_if(kFingerprint, text_of(j, "fingerprint"));
  if (auto n = number_of(j, "deliveries"); n && *n >= 0) add(kAttempts, std::to_string(*n));
  add_if(kMessage, text_of(j, "message").substr(0, kMaxRecordedMessage));
  add_if(kReason, text_of(j, "reason").substr(0, kMaxRecordedMessage));
  if (auto tail = base64_decode(text_of(j, "stderr_tail_b64")); tail && !tail->empty()) {
    add(kStderr, tail->size() > kStderrTailBytes ? tail->substr(tail->size() - kStderrTailBytes) : *tail);
  }
  add_if(kHandler, text_of(j, "handler_identity").substr(0, kMaxRecordedMessage));
  add_if(kPolicy, text_of(j, "policy_identity").substr(0, kMaxRecordedMessage));
  json headers_note = {{"carried", carried}, {"renamed", renamed}, {"dropped", dropped}};
  if (renamed > 0) {
    headers_note["renamed_as"] = "named like pillbox's own: carried as " + std::string(kRenamedHeaderPrefix) + "NAME";
  }
  if (dropped > 0) {
    headers_note["dropped_bytes"] = dropped_bytes;
    headers_note["dropped_why"] = "past the " + std::to_string(kMaxKafkaCarriedHeaders) +
                                  " bytes of the original's headers a dead letter carries (Kafka's record size)";
  }
  add(kHeadersNote, dumped(headers_note));
  if (omitted != nullptr) {
    add(kPayloadOmitted, "true");
    add(kPayloadSize, std::to_string(omitted->size));
    add(kPayloadSha256, omitted->sha256);
  }
  if (omitted_key != nullptr) {
    add(kKeyOmitted, "true");
    add(kKeySize, std::to_string(omitted_key->size));
    add(kKeySha256, omitted_key->sha256);
  }
  return out;
}

}  // namespace

KafkaOutgoing kafka_dead_letter(const KafkaMessage& original, const std::string& record, const FleetKey* fleet_key) {
  auto letter = [&](const OmittedValue* omitted, const OmittedValue* omitted_key) {
    KafkaOutgoing out = unsigned_dead_letter(original, record, omitted, omitted_key);
    if (fleet_key != nullptr) {
      out.headers.emplace_back(std::string(kSignatureHeader),
                               fleet_key->sign(out.topic, kafka_dead_letter_signed_fields(out.key, out.value, out.headers)));
    }
    return out;
  };
  KafkaOutgoing out = letter(nullptr, nullptr);
  // One the cluster would refuse would settle nothing: every worker that
  // got the record would stop on it, its partition stuck. It goes without
  // the value (T keeps it at its offset), as a result goes without its
  // output; and, still too large, without its key.
  const auto omitted = omit_value_to_fit(out);
  if (omitted) out = letter(&*omitted, nullptr);
  if (const auto omitted_key = omit_key_to_fit(out)) out = letter(omitted ? &*omitted : nullptr, &*omitted_key);
  return out;
}

KafkaDeadLetter read_kafka_dead_letter(const KafkaMessage& letter) {
  KafkaDeadLetter d;
  d.topic = letter.topic;
  d.partition = letter.partition;
  d.offset = letter.offset;
  d.timestamp_ms = letter.timestamp_ms;
  d.key = letter.key;
  d.value = letter.value;

  // pillbox's headers as they came: each read once (a second is noted, the
  // first kept), a null one or a longer one than pillbox writes noted.
  struct Part {
    std::string_view name;
    std::size_t max;
    const std::string* text = nullptr;
  };
  Part parts[] = {{kRecordHeader, kMaxKafkaRecordJson}, {kDedupe, kMaxContextText},
                  {kSourceTopic, kMaxContextText},      {kSourcePartition, 32},
                  {kSourceOffset, 32},                  {kKind, kMaxContextText},
                  {kFingerprint, kMaxContextText},      {kAttempts, 32},
                  {kMessage, kMaxContextText},          {kReason, kMaxContextText},
                  {kStderr, kStderrTailBytes},          {kHandler, kMaxContextText},
                  {kPolicy, kMaxContextText},           {kHeadersNote, kMaxHeadersNote},
                  {kPayloadOmitted, 8},                 {kPayloadSize, 32},
                  {kPayloadSha256, 64},                 {kKeyOmitted, 8},
                  {kKeySize, 32},                       {kKeySha256, 64}};
  for (const auto& [name, value] : letter.headers) {
    if (name == kSignatureHeader) {
      d.has_signature = true;
      continue;
    }
    if (!pillbox_named(name) || name.rfind(kRenamedHeaderPrefix, 0) == 0) {
      d.carried.emplace_back(name, value);
      continue;
    }
    Part* part = nullptr;
    for (Part& p : parts) {
      if (p.name == name) part = &p;
    }
    if (part == nullptr) {
      note(d.unreadable, "header " + name.substr(0, 64) + ": named like pillbox's, and none pillbox writes");
    } else if (part->text != nullptr) {
      note(d.unreadable, name + ": given twice (the first read)");
    } else if (!value) {
      note(d.unreadable, name + ": null");
    } else if (value->size() > part->max) {
      note(d.unreadable, name + ": " + std::to_string(value->size()) + " bytes, over the " + std::to_string(part->max) +
                             " pillbox writes");
    } else {
      part->text = &*value;
    }
  }
  auto text = [&](std::string_view name) -> const std::string* {
    for (const Part& p : parts) {
      if (p.name == name) return p.text;
    }
    return nullptr;
  };
  auto copy = [&](std::string_view name, std::string& into) {
    if (const std::string* t = text(name)) into = *t;
  };
  auto number = [&](std::string_view name, std::int64_t max, auto& into) {
    const std::string* t = text(name);
    if (t == nullptr) return;
    if (auto n = canonical_number(*t, max)) {
      into = static_cast<std::remove_reference_t<decltype(into)>>(*n);
    } else {
      note(d.unreadable, std::string(name) + ": not a number pillbox writes");
    }
  };
  auto object = [&](std::string_view name, std::size_t max, json& into) {
    const std::string* t = text(name);
    if (t == nullptr) return;
    UntrustedJson parsed = parse_untrusted_json(*t, max);
    if (parsed.value.is_discarded() || !parsed.value.is_object()) {
      note(d.unreadable, std::string(name) + ": " + (parsed.why_not.empty() ? "not a JSON object" : parsed.why_not));
      return;
    }
    into = std::move(parsed.value);
  };
  object(kRecordHeader, kMaxKafkaRecordJson, d.record);
  object(kHeadersNote, kMaxHeadersNote, d.headers_note);
  copy(kDedupe, d.dedupe);
  copy(kSourceTopic, d.source_topic);
  number(kSourcePartition, std::numeric_limits<std::int32_t>::max(), d.source_partition);
  number(kSourceOffset, std::numeric_limits<std::int64_t>::max(), d.source_offset);
  copy(kKind, d.kind);
  copy(kFingerprint, d.fingerprint);
  number(kAttempts, std::numeric_limits<std::int64_t>::max(), d.attempts);
  copy(kMessage, d.message);
  copy(kReason, d.reason);
  copy(kStderr, d.stderr_tail);
  copy(kHandler, d.handler);
  copy(kPolicy, d.policy);
  if (const std::string* omitted = text(kPayloadOmitted)) {
    if (*omitted == "true") {
      d.payload_omitted = true;
      number(kPayloadSize, std::numeric_limits<std::int64_t>::max(), d.payload_size);
      copy(kPayloadSha256, d.payload_sha256);
    } else {
      note(d.unreadable, std::string(kPayloadOmitted) + ": not \"true\", the only value pillbox writes");
    }
  }

  // The dedupe key is its source's only when every part that names the
  // source says the same: the context headers and the record's `topic`.
  if (!d.dedupe.empty()) {
    const bool named = !d.source_topic.empty() && d.source_partition >= 0 && d.source_offset >= 0;
    const std::string own = named ? kafka_source_key(d.source_topic, d.source_partition, d.source_offset) : "";
    bool agrees = named && d.dedupe == own;
    if (!agrees) {
      note(d.unreadable, "pillbox.dedupe is not the key of the source its pillbox.source.* headers name (" +
                             (named ? own : std::string("none")) + ")");
    }
    // A record that names no source (one left out as too long) says
    // nothing against them.
    if (const auto source = d.record.find("topic"); agrees && d.from_pillbox() && source != d.record.end()) {
      const bool record_agrees = source->is_object() && text_of(*source, "name") == d.source_topic &&
                                 number_of(*source, "partition") == d.source_partition &&
                                 number_of(*source, "offset") == d.source_offset;
      if (!record_agrees) {
        note(d.unreadable, "its record's `topic` names another source than its pillbox.source.* headers");
        agrees = false;
      }
    }
    if (agrees) d.dedupe_key = d.dedupe;
  }
  return d;
}

SignedFields kafka_dead_letter_signed_fields(const std::optional<std::string>& key,
                                             const std::optional<std::string>& value, const KafkaHeaders& headers) {
  SignedFields fields;
  if (key) fields.emplace_back("key", *key);
  if (value) fields.emplace_back("payload", *value);
  // Every header in order, each one field "header" (the canonical form
  // sorts fields by name, stably): its name's length, the name, then "="
  // and its value, or "!" for a null one.
  for (const auto& [name, v] : headers) {
    if (name == kSignatureHeader) {
      fields.emplace_back("sig", v.value_or(""));
      continue;
    }
    fields.emplace_back("header", std::to_string(name.size()) + ":" + name + (v ? "=" + *v : std::string("!")));
  }
  return fields;
}

Signature kafka_dead_letter_signature(const KafkaMessage& letter, const FleetKey* fleet_key) {
  if (fleet_key == nullptr) return Signature::kUnchecked;
  return fleet_key->verify(letter.topic, kafka_dead_letter_signed_fields(letter.key, letter.value, letter.headers));
}

}  // namespace pillbox::broker
