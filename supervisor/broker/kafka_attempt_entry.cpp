#include "supervisor/broker/kafka_attempt_entry.h"

#include <cstdint>
#include <limits>
#include <nlohmann/json.hpp>
#include <utility>

#include "supervisor/broker/worker_settings.h"
#include "supervisor/io/untrusted_json.h"

namespace pillbox::broker {
namespace {

using nlohmann::json;

constexpr std::int64_t kInt64Min = std::numeric_limits<std::int64_t>::min();
constexpr std::int64_t kInt64Max = std::numeric_limits<std::int64_t>::max();
constexpr std::int64_t kInt32Max = std::numeric_limits<std::int32_t>::max();

constexpr std::int64_t kVersion = 1;
// A worker's name (host:pid...) and a settle's place (T.dlq p@o).
constexpr std::size_t kMaxNameBytes = 1024;

const char* kind_name(AttemptEntryKind kind) {
  switch (kind) {
    case AttemptEntryKind::kStart: return "start";
    case AttemptEntryKind::kEnd: return "end";
    case AttemptEntryKind::kSettled: return "settled";
  }
  return "start";
}

std::optional<AttemptEntryKind> kind_of(const std::string& name) {
  for (auto k : {AttemptEntryKind::kStart, AttemptEntryKind::kEnd, AttemptEntryKind::kSettled}) {
    if (name == kind_name(k)) return k;
  }
  return std::nullopt;
}

std::optional<KafkaSettlement::How> how_of(const std::string& name) {
  using How = KafkaSettlement::How;
  for (auto h : {How::kOk, How::kDeadLetter, How::kRefused}) {
    if (name == settlement_name(h)) return h;
  }
  return std::nullopt;
}

ParsedAttemptEntry unreadable(std::string why) { return {std::nullopt, std::move(why)}; }

// j[name] as a whole number within [low, high], or nullopt.
std::optional<std::int64_t> whole(const json& j, const char* name, std::int64_t low, std::int64_t high) {
  const auto it = j.find(name);
  if (it == j.end()) return std::nullopt;
  const auto n = json_whole_number(*it);
  if (!n || *n < low || *n > high) return std::nullopt;
  return n;
}

// j[name] as text of at most kMaxNameBytes ("" when absent), or nullopt.
std::optional<std::string> name_text(const json& j, const char* name) {
  const auto it = j.find(name);
  if (it == j.end()) return std::string();
  if (!it->is_string() || it->get_ref<const std::string&>().size() > kMaxNameBytes) return std::nullopt;
  return it->get<std::string>();
}

}  // namespace

std::string attempt_log_topic(const std::string& topic) { return topic + ".pillbox-attempts"; }

const char* settlement_name(KafkaSettlement::How how) {
  switch (how) {
    case KafkaSettlement::How::kOk: return "ok";
    case KafkaSettlement::How::kDeadLetter: return "dead-letter";
    case KafkaSettlement::How::kRefused: return "refused";
  }
  return "ok";
}

AttemptEntry attempt_start(std::int32_t partition, std::int64_t offset, std::uint32_t delivery, std::string worker,
                           std::int64_t at_ms) {
  AttemptEntry e;
  e.partition = partition;
  e.offset = offset;
  e.delivery = delivery;
  e.kind = AttemptEntryKind::kStart;
  e.worker = std::move(worker);
  e.at_ms = at_ms;
  return e;
}

AttemptEntry attempt_end(std::int32_t partition, std::int64_t offset, RecordedDelivery end) {
  AttemptEntry e = attempt_start(partition, offset, end.delivery, end.worker, end.at_ms);
  e.kind = AttemptEntryKind::kEnd;
  e.end = std::move(end);
  return e;
}

AttemptEntry attempt_settled(std::int32_t partition, std::int64_t offset, std::uint32_t delivery, std::string worker,
                             std::int64_t at_ms, KafkaSettlement settlement) {
  AttemptEntry e = attempt_start(partition, offset, delivery, std::move(worker), at_ms);
  e.kind = AttemptEntryKind::kSettled;
  e.settlement = std::move(settlement);
  return e;
}

std::string attempt_entry_key(std::int32_t partition, std::int64_t offset) {
  return std::to_string(partition) + ":" + std::to_string(offset);
}

std::string attempt_entry_json(const AttemptEntry& e) {
  json j = {{"v", kVersion},         {"partition", e.partition}, {"offset", e.offset},
            {"delivery", e.delivery}, {"entry", kind_name(e.kind)}, {"worker", e.worker},
            {"group", e.group},      {"at_ms", e.at_ms}};
  if (e.kind == AttemptEntryKind::kEnd) {
    // The one outcome format (delivery_history.h), nested as an object so
    // that the log reads as JSON; delivery_json replaced what was not UTF-8.
    j["record"] = json::parse(delivery_json(e.end));
  } else if (e.kind == AttemptEntryKind::kSettled) {
    j["how"] = settlement_name(e.settlement.how);
    j["where"] = e.settlement.where;
  }
  return j.dump(-1, ' ', false, json::error_handler_t::replace);
}

KafkaOutgoing attempt_entry_record(const std::string& topic, const AttemptEntry& entry) {
  KafkaOutgoing out;
  out.topic = attempt_log_topic(topic);
  out.partition = entry.partition;
  out.key = attempt_entry_key(entry.partition, entry.offset);
  out.value = attempt_entry_json(entry);
  return out;
}

ParsedAttemptEntry parse_attempt_entry(std::int32_t log_partition, const std::optional<std::string>& key,
                                       const std::optional<std::string>& value) {
  if (!value) return unreadable("no value");
  if (value->size() > kMaxAttemptEntryBytes) {
    return unreadable("a value of " + std::to_string(value->size()) + " bytes (pillbox writes at most " +
                      std::to_string(kMaxAttemptEntryBytes) + ")");
  }
  const UntrustedJson parsed = parse_untrusted_json(*value, kMaxAttemptEntryBytes);
  if (parsed.value.is_discarded()) return unreadable(parsed.why_not);
  const json& j = parsed.value;
  if (!j.is_object()) return unreadable("not a JSON object");
  const auto version = whole(j, "v", 0, kInt64Max);
  if (!version) return unreadable("no version (\"v\")");
  if (*version != kVersion) return unreadable("version " + std::to_string(*version) + ", not one this pillbox reads");

  AttemptEntry e;
  const auto partition = whole(j, "partition", 0, kInt32Max);
  const auto offset = whole(j, "offset", 0, kInt64Max);
  const auto delivery = whole(j, "delivery", 1, kMaxDeliveries);
  if (!partition || !offset) return unreadable("no partition and offset of the record");
  if (*partition != log_partition) {
    return unreadable("an entry of partition " + std::to_string(*partition) + " in partition " +
                      std::to_string(log_partition));
  }
  e.partition = static_cast<std::int32_t>(*partition);
  e.offset = *offset;
  if (key != attempt_entry_key(e.partition, e.offset)) return unreadable("its key is not \"partition:offset\"");
  if (!delivery) return unreadable("no delivery number within 1.." + std::to_string(kMaxDeliveries));
  e.delivery = static_cast<std::uint32_t>(*delivery);
  const auto kind_it = j.find("entry");
  const auto kind = kind_it != j.end() && kind_it->is_string() ? kind_of(kind_it->get<std::string>()) : std::nullopt;
  if (!kind) return unreadable("\"entry\" is not start, end or settled");
  e.kind = *kind;
  auto worker = name_text(j, "worker");
  if (!worker) return unreadable("\"worker\" is not a name");
  e.worker = std::move(*worker);
  auto group = name_text(j, "group");
  if (!group) return unreadable("\"group\" is not a name");
  e.group = std::move(*group);
  if (j.contains("at_ms")) {
    const auto at = whole(j, "at_ms", kInt64Min, kInt64Max);
    if (!at) return unreadable("\"at_ms\" is not a time");
    e.at_ms = *at;
  }

  if (e.kind == AttemptEntryKind::kEnd) {
    const auto record = j.find("record");
    if (record == j.end() || !record->is_object()) return unreadable("an end without its record");
    // The record's own delivery number, when it gives one, is the entry's.
    if (record->contains("delivery") && whole(*record, "delivery", e.delivery, e.delivery) != e.delivery) {
      return unreadable("an end whose record is of another delivery");
    }
    auto d = parse_delivery(e.delivery, record->dump());
    if (!d) return unreadable("an end whose record is not a delivery pillbox records");
    if (d->started) return unreadable("an end whose record is a start");
    e.end = std::move(*d);
  } else if (e.kind == AttemptEntryKind::kSettled) {
    const auto how_it = j.find("how");
    const auto how = how_it != j.end() && how_it->is_string() ? how_of(how_it->get<std::string>()) : std::nullopt;
    auto where = name_text(j, "where");
    if (!how) return unreadable("a settle that is not ok, dead-letter or refused");
    if (!where) return unreadable("a settle whose \"where\" is not a place");
    e.settlement = {*how, std::move(*where)};
  }
  return {std::move(e), ""};
}

}  // namespace pillbox::broker
