#include "supervisor/broker/kafka_fleet_record.h"

#include <algorithm>
#include <map>
#include <utility>

#include "shared/base64.h"
#include "shared/fingerprint.h"
#include "shared/sha256.h"
#include "supervisor/store/quarantine_json.h"

namespace pillbox::broker {
namespace {

using nlohmann::json;

// A header's value as JSON text can hold it: text when it is UTF-8, else
// base64 (a header is bytes), null when null.
json header_json(const std::string& name, const std::optional<std::string>& value) {
  json h = {{"name", is_valid_utf8(name) ? name : base64_encode(name)}};
  if (!value) {
    h["value"] = nullptr;
  } else if (is_valid_utf8(*value)) {
    h["value"] = *value;
  } else {
    h["value_b64"] = base64_encode(*value);
  }
  return h;
}

bool digits(std::string_view s, std::size_t max) {
  return !s.empty() && s.size() <= max && std::all_of(s.begin(), s.end(), [](char c) { return c >= '0' && c <= '9'; });
}

}  // namespace

std::string kafka_record_id(std::int32_t partition, std::int64_t offset) {
  return std::to_string(partition) + "@" + std::to_string(offset);
}

Expected<std::string> parse_kafka_record_id(const std::string& text) {
  const auto at = text.find('@');
  const std::string p = at == std::string::npos ? "" : text.substr(0, at);
  const std::string o = at == std::string::npos ? "" : text.substr(at + 1);
  // A partition fits an int32 (9 digits do), an offset an int64 (18 do).
  if (!digits(p, 9) || !digits(o, 18)) {
    return Error::usage("'" + text + "' is not a record ID of the fleet's quarantine on Kafka: its IDs are "
                        "PARTITION@OFFSET in the topic T.dlq, such as 0@42 (see: pillbox quarantine list)");
  }
  return kafka_record_id(static_cast<std::int32_t>(std::stol(p)), std::stoll(o));
}

Expected<KafkaPlace> parse_kafka_place(const std::string& text) {
  auto checked = parse_kafka_record_id(text);
  if (!checked) return Error{checked.error(), checked.error_code()};
  const auto at = checked->find('@');
  return KafkaPlace{static_cast<std::int32_t>(std::stol(checked->substr(0, at))), std::stoll(checked->substr(at + 1))};
}

FleetRecord kafka_fleet_record(const KafkaDeadLetter& d, Signature signature) {
  FleetRecord r;
  r.id = kafka_record_id(d.partition, d.offset);
  r.payload = d.value.value_or("");
  r.signature = signature;
  r.stream = d.source_topic;
  if (d.source_partition >= 0 && d.source_offset >= 0) r.source_entry = kafka_record_id(d.source_partition, d.source_offset);

  DeadLetterClaims own;
  own.key = d.key.value_or("");
  own.kind = d.kind;
  own.fingerprint = d.fingerprint;
  if (d.payload_omitted) {
    // Not in the letter: what its headers say of it (its record may say more).
    r.payload_omitted = true;
    r.payload_omitted_why = "its dead letter was written without it (too large for a Kafka record with pillbox's "
                            "headers); the original is in " + (d.source_topic.empty() ? "the source topic" : d.source_topic) +
                            (d.source_partition >= 0 && d.source_offset >= 0
                                 ? " partition " + std::to_string(d.source_partition) + " at offset " +
                                       std::to_string(d.source_offset)
                                 : std::string()) +
                            " while its retention keeps it";
    own.payload_sha256 = d.payload_sha256;
    own.payload_size = std::max<std::int64_t>(d.payload_size, 0);
  } else {
    own.payload_sha256 = sha256_hex(r.payload);
    own.payload_size = static_cast<std::int64_t>(r.payload.size());
  }
  std::string message = d.unreadable.empty() ? "" : "its dead letter cannot be read: " + d.unreadable;
  if (!d.from_pillbox() && !d.kind.empty()) {
    // No record, but the context headers' claim of what failed.
    const std::string claims = "its dead letter has no readable pillbox-record: what its pillbox.* headers say" +
                               (d.message.empty() ? std::string() : ": " + d.message);
    message = message.empty() ? claims : claims + "; " + message;
  } else if (!d.from_pillbox()) {
    // No record and no claim of what failed: not a worker's.
    own.kind = std::string(to_string(Kind::kProtocolError));
    own.fingerprint = make_fingerprint(Kind::kProtocolError, "kafka-foreign-dead-letter", {}, "");
    const std::string foreign = "not a dead letter pillbox wrote: no readable pillbox-record header and no "
                                "pillbox.kind (produced to " + d.topic + " by another client?)";
    message = message.empty() ? foreign : foreign + "; " + message;
  }
  const json& j = d.from_pillbox() ? d.record : json::object();
  read_worker_record(j, own, message, r);
  if (r.record.entry.payload_size < 0) r.record.entry.payload_size = 0;
  if (!d.from_pillbox() && d.attempts > 0 && d.attempts <= 0xffffffffLL) {
    r.deliveries = static_cast<std::uint32_t>(d.attempts);
  }
  if (!d.from_pillbox()) r.record.entry.stderr_tail = d.stderr_tail;  // at most kStderrTailBytes, as read
  if (const auto source = j.find("topic"); source != j.end() && source->is_object()) {
    if (const auto g = source->find("group"); g != source->end() && g->is_string()) r.group = g->get<std::string>();
  }
  // When it was dead-lettered: the record's claim, else the letter's own
  // timestamp (its producer's or the broker's, as T.dlq is set).
  std::int64_t created = d.timestamp_ms > 0 ? d.timestamp_ms : 0;
  if (const auto at = j.find("created_at"); at != j.end() && at->is_string()) {
    created = parse_iso_time(at->get<std::string>()).value_or(created);
  }
  r.record.created_at = r.record.updated_at = created;

  json carried = json::array();
  for (const auto& [name, value] : d.carried) carried.push_back(header_json(name, value));
  json broker = {{"topic", d.topic},
                 {"partition", d.partition},
                 {"offset", d.offset},
                 {"source", {{"topic", d.source_topic}, {"partition", d.source_partition}, {"offset", d.source_offset}}},
                 {"dedupe", d.dedupe},
                 {"key_null", !d.key.has_value()},
                 {"value_null", !d.value.has_value()},
                 {"payload_omitted", d.payload_omitted},
                 {"headers", std::move(carried)},
                 {"headers_note", d.headers_note}};
  if (d.from_pillbox()) broker["deliveries"] = r.deliveries;
  if (!d.unreadable.empty()) broker["unreadable"] = d.unreadable;
  r.broker = std::move(broker);
  return r;
}

std::string kafka_copy_key(const KafkaDeadLetter& d, Signature signature) {
  if (d.dedupe_key.empty()) return "";
  const std::string value = d.value ? sha256_hex(*d.value) : "null";
  const std::string how = signature != Signature::kUnchecked ? std::string(to_string(signature))
                          : d.has_signature                  ? "signed"
                                                             : "unsigned";
  return d.dedupe_key + '\n' + value + '\n' + how;
}

std::vector<std::optional<std::size_t>> kafka_copies(const std::vector<std::string>& copy_keys) {
  std::vector<std::optional<std::size_t>> copy_of(copy_keys.size());
  std::map<std::string, std::size_t> first;
  for (std::size_t i = 0; i < copy_keys.size(); ++i) {
    if (copy_keys[i].empty()) continue;
    const auto [it, inserted] = first.emplace(copy_keys[i], i);
    if (!inserted) copy_of[i] = it->second;
  }
  return copy_of;
}

}  // namespace pillbox::broker
