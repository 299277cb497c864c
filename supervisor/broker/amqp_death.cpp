#include "supervisor/broker/amqp_death.h"

#include <algorithm>
#include <array>
#include <string_view>

namespace pillbox::broker {
namespace {

constexpr std::array<std::string_view, 4> kReasons = {"rejected", "expired", "maxlen", "delivery_limit"};
constexpr std::int64_t kMaxCount = 2147483647;

std::string text_field(const AmqpTable& t, std::string_view name) {
  const AmqpValue* v = find_field(t, name);
  const std::string* s = v != nullptr ? v->text() : nullptr;
  return s != nullptr ? s->substr(0, 255) : std::string();
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
    }
    if (const AmqpValue* time = find_field(*t, "time"); time != nullptr && time->integer()) d.time_s = *time->integer();
    if (const AmqpValue* keys = find_field(*t, "routing-keys"); keys != nullptr && keys->items() != nullptr) {
      for (const AmqpValue& k : *keys->items()) {
        if (k.text() != nullptr && d.routing_keys.size() < 16) d.routing_keys.push_back(k.text()->substr(0, 255));
      }
    }
    out.deaths.push_back(std::move(d));
  }
  return out;
}

nlohmann::json to_json(const AmqpDeaths& deaths) {
  nlohmann::json a = nlohmann::json::array();
  for (const AmqpDeath& d : deaths.deaths) {
    nlohmann::json j = {{"reason", d.reason}, {"queue", d.queue}, {"count", d.count}};
    if (!d.said.empty()) j["said"] = d.said;
    if (d.time_s) j["time"] = *d.time_s;
    if (!d.exchange.empty()) j["exchange"] = d.exchange;
    if (!d.routing_keys.empty()) j["routing_keys"] = d.routing_keys;
    a.push_back(std::move(j));
  }
  nlohmann::json out = {{"deaths", std::move(a)}};
  if (deaths.unreadable > 0) out["unreadable"] = deaths.unreadable;
  return out;
}

}  // namespace pillbox::broker
