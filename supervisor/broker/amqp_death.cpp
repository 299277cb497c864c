#include "supervisor/broker/amqp_death.h"

#include "shared/base64.h"

#include <algorithm>
#include <array>
#include <string_view>

namespace pillbox::broker {
namespace {

constexpr std::array<std::string_view, 4> kReasons = {"rejected", "expired", "maxlen", "delivery_limit"};
constexpr std::int64_t kMaxCount = 2147483647;

// At most 255 bytes, not cut inside a UTF-8 character.
std::string cut(const std::string& s) {
  if (s.size() <= 255) return s;
  std::size_t end = 255;
  while (end > 0 && (static_cast<unsigned char>(s[end]) & 0xC0) == 0x80) --end;  // s[end] starts the next character
  return s.substr(0, end);
}

std::string text_field(const AmqpTable& t, std::string_view name) {
  const AmqpValue* v = find_field(t, name);
  const std::string* s = v != nullptr ? v->text() : nullptr;
  return s != nullptr ? cut(*s) : std::string();
}

// A name as JSON: a string when it is UTF-8, else {"bytes_b64": ...}, as
// amqp_value.h shows bytes (dump() refuses what is not UTF-8).
nlohmann::json json_text(const std::string& s) {
  if (is_valid_utf8(s)) return s;
  return {{"bytes_b64", base64_encode(s)}};
}

}  // namespace

AmqpDeaths deaths_of(const AmqpTable& headers) {
  AmqpDeaths out;
  const AmqpValue* x_death = find_field(headers, "x-death");
  if (x_death == nullptr) return out;
  const AmqpArray* items = x_death->items();
  if (items == nullptr) {
    out.unreadable = 1;
    return out;
  }
  for (const AmqpValue& item : *items) {
    const AmqpTable* t = item.fields();
    if (t == nullptr || out.deaths.size() >= kMaxAmqpDeaths) {
      ++out.unreadable;
      continue;
    }
    AmqpDeath d;
    const std::string reason = text_field(*t, "reason");
    d.queue = text_field(*t, "queue");
    if (reason.empty() || d.queue.empty()) {
      ++out.unreadable;
      continue;
    }
    if (std::find(kReasons.begin(), kReasons.end(), reason) != kReasons.end()) {
      d.reason = reason;
    } else {
      d.reason = "other";
      d.said = reason;
    }
    d.exchange = text_field(*t, "exchange");
    if (const AmqpValue* c = find_field(*t, "count"); c != nullptr && c->integer()) {
      d.count = std::clamp<std::int64_t>(*c->integer(), 0, kMaxCount);
    } else if (c != nullptr && std::holds_alternative<std::uint64_t>(c->value)) {
      d.count = kMaxCount;  // over int64: the most, not none
    }
    if (const AmqpValue* time = find_field(*t, "time"); time != nullptr && time->integer()) d.time_s = *time->integer();
    if (const AmqpValue* keys = find_field(*t, "routing-keys"); keys != nullptr && keys->items() != nullptr) {
      for (const AmqpValue& k : *keys->items()) {
        if (k.text() != nullptr && d.routing_keys.size() < 16) d.routing_keys.push_back(cut(*k.text()));
      }
    }
    out.deaths.push_back(std::move(d));
  }
  return out;
}

nlohmann::json to_json(const AmqpDeaths& deaths) {
  nlohmann::json a = nlohmann::json::array();
  for (const AmqpDeath& d : deaths.deaths) {
    nlohmann::json j = {{"reason", d.reason}, {"queue", json_text(d.queue)}, {"count", d.count}};
    if (!d.said.empty()) j["said"] = json_text(d.said);
    if (d.time_s) j["time"] = *d.time_s;
    if (!d.exchange.empty()) j["exchange"] = json_text(d.exchange);
    if (!d.routing_keys.empty()) {
      j["routing_keys"] = nlohmann::json::array();
      for (const std::string& k : d.routing_keys) j["routing_keys"].push_back(json_text(k));
    }
    a.push_back(std::move(j));
  }
  nlohmann::json out = {{"deaths", std::move(a)}};
  if (deaths.unreadable > 0) out["unreadable"] = deaths.unreadable;
  return out;
}

}  // namespace pillbox::broker
