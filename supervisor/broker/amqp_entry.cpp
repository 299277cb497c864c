#include "supervisor/broker/amqp_entry.h"

#include <algorithm>
#include <map>
#include <nlohmann/json.hpp>
#include <utility>

#include "shared/sha256.h"
#include "supervisor/broker/amqp_dead_letter.h"
#include "supervisor/broker/amqp_topology.h"
#include "supervisor/io/untrusted_json.h"

namespace pillbox::broker {
namespace {

bool is_history_header(std::string_view name) { return name == kAttemptsHeader || name == kDeliveriesHeader; }

std::string dumped(const nlohmann::json& j) { return j.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace); }

// The records the history header holds, by delivery (each as
// delivery_json wrote it), or why they cannot be read. Only deliveries
// 1..carried: a record beyond what the copy counted is not pillbox's.
struct CarriedHistory {
  std::map<std::uint32_t, std::string> records;
  std::string unreadable;
};

CarriedHistory carried_history(const AmqpValue* header, std::int64_t carried) {
  CarriedHistory h;
  if (header == nullptr) {
    if (carried > 0) h.unreadable = "it says " + std::to_string(carried) + " deliveries came before but carries no " +
                                    std::string(kAttemptsHeader);
    return h;
  }
  const std::string* text = header->text();
  if (text == nullptr) {
    h.unreadable = std::string(kAttemptsHeader) + " is not a string";
    return h;
  }
  auto parsed = parse_untrusted_json(*text, kMaxCarriedHistory);
  if (parsed.value.is_discarded() || !parsed.value.is_array()) {
    h.unreadable = std::string(kAttemptsHeader) + ": " + (parsed.why_not.empty() ? "not a JSON array" : parsed.why_not);
    return h;
  }
  for (const nlohmann::json& d : parsed.value) {
    const auto n = d.is_object() ? json_whole_number(d.value("delivery", nlohmann::json())) : std::nullopt;
    if (!n || *n < 1 || *n > carried || h.records.count(static_cast<std::uint32_t>(*n)) > 0) {
      h.unreadable = std::string(kAttemptsHeader) + " holds a record that is not one of deliveries 1.." +
                     std::to_string(carried) + " (or one twice)";
      return h;
    }
    h.records[static_cast<std::uint32_t>(*n)] = dumped(d);
  }
  return h;
}

// The history header a copy carries: every record. Over
// kMaxCarriedHistory, the oldest records lose their message and crash
// state first (never a whole record: a delivery without one would read as
// lost).
std::string history_text(const EntryHistory& history, const RecordedDelivery& ended) {
  std::vector<RecordedDelivery> records = history.recorded;
  records.insert(records.end(), history.lost_starts.begin(), history.lost_starts.end());
  std::sort(records.begin(), records.end(),
            [](const RecordedDelivery& a, const RecordedDelivery& b) { return a.delivery < b.delivery; });
  records.push_back(ended);
  auto text_of = [&records]() {
    std::string text = "[";
    for (std::size_t i = 0; i < records.size(); ++i) text += (i > 0 ? "," : "") + delivery_json(records[i]);
    return text + "]";
  };
  std::string text = text_of();
  for (std::size_t i = 0; text.size() > kMaxCarriedHistory && i + 1 < records.size(); ++i) {
    records[i].message.clear();
    records[i].crash_state.clear();
    text = text_of();
  }
  return text;
}

Refused unreadable_history(const WorkerSettings& settings, const AmqpHeld& e) {
  return {protocol_error("message " + e.id + ": its delivery history (" + std::string(kAttemptsHeader) + ", " +
                             std::string(kDeliveriesHeader) + ") is not pillbox's: " + e.history_unreadable +
                             "; its deliveries cannot be judged",
                         settings.identity.handler_identity),
          "history not readable: not run"};
}

}  // namespace

void read_message(AmqpMessage m, AmqpHeld& e) {
  e.task.payload = std::move(m.body);
  m.body.clear();
  e.id = !m.message_id.empty() ? m.message_id : "delivery " + std::to_string(m.delivery_tag);
  if (m.key) {
    e.task.key = *m.key;
  } else if (!m.message_id.empty()) {
    e.task.key = m.message_id;
  } else {
    e.task.key = "message:" + sha256_hex(e.task.payload).substr(0, 16);
  }
  // pillbox's own headers are read here and left out of what the message
  // carries on (its copies write them anew; a dead letter's record has them).
  std::optional<AmqpValue> attempts;
  std::optional<AmqpValue> deliveries;
  AmqpTable kept;
  for (AmqpField& f : m.headers) {
    if (f.name == kAttemptsHeader && !attempts) attempts = std::move(f.value);
    else if (f.name == kDeliveriesHeader && !deliveries) deliveries = std::move(f.value);
    else if (!is_history_header(f.name)) kept.push_back(std::move(f));
    else e.history_unreadable = "header " + f.name + " given twice";
  }
  m.headers = std::move(kept);
  if (deliveries) {
    const auto n = deliveries->integer();
    if (!n || *n < 0 || *n >= kMaxDeliveries) {
      e.history_unreadable = std::string(kDeliveriesHeader) + " is not a count within 0.." +
                             std::to_string(kMaxDeliveries - 1);
    } else {
      e.carried = *n;
    }
  }
  // The broker's count is a claim too (a publisher may send the header):
  // out of range, the delivery is not judged (check_message).
  const std::int64_t count = std::clamp<std::int64_t>(m.delivery_count, 0, kMaxDeliveries);
  e.delivery = e.carried + count + 1;
  if (e.history_unreadable.empty()) {
    CarriedHistory h = carried_history(attempts ? &*attempts : nullptr, e.carried);
    e.history_unreadable = std::move(h.unreadable);
    if (e.history_unreadable.empty() && judgeable(e.delivery)) {
      e.history = entry_history(static_cast<std::uint32_t>(e.delivery), h.records, UnmarkedSuspect::kUnstarted);
      if (e.history.unreadable > 0) e.history_unreadable = "a record in it is not a delivery pillbox recorded";
    }
  }
  e.message = std::move(m);
}

std::optional<Refused> check_message(const WorkerSettings& settings, const AmqpHeld& e) {
  const std::string& handler = settings.identity.handler_identity;
  if (!judgeable(e.delivery)) {
    return Refused{protocol_error("message " + e.id + " is at delivery " + std::to_string(e.delivery) +
                                      ", not within 1.." + std::to_string(kMaxDeliveries) +
                                      ": its x-delivery-count or " + std::string(kDeliveriesHeader) +
                                      " was set by hand, not by deliveries; its history is not read",
                                  handler),
                   "delivery count out of range: not run"};
  }
  if (!e.history_unreadable.empty()) return unreadable_history(settings, e);
  if (auto refused = oversized("payload", e.task.payload.size(), settings.max_payload, handler)) return refused;
  if (auto refused = oversized("key", e.task.key.size(), settings.max_key, handler)) return refused;
  if (kills_workers(settings, e)) {
    return Refused{workers_lost(e.history.lost.size(), handler,
                                "each died, or lost its connection to RabbitMQ, while it ran this message"),
                   std::to_string(e.history.lost.size()) + " deliveries never reported back: it kills workers; not run again",
                   false};
  }
  return std::nullopt;
}

AmqpPublication carried_copy(const AmqpHeld& e, const RecordedDelivery& ended, const std::string& queue) {
  AmqpPublication p;
  p.routing_key = queue;
  p.body = e.task.payload;
  p.message.message_id = e.message.message_id;
  p.message.correlation_id = e.message.correlation_id;
  p.message.reply_to = e.message.reply_to;
  for (const AmqpField& f : e.message.headers) {
    // The broker's own (x-delivery-count, x-death, x-first-death-*) are its
    // to write again; a copy that carried them would claim them.
    if (f.name.rfind("x-", 0) == 0) continue;
    p.message.headers.push_back(f);
  }
  if (!e.message.key) p.message.headers.push_back({"key", e.task.key});
  p.message.headers.push_back({std::string(kDeliveriesHeader), AmqpValue(static_cast<std::int64_t>(ended.delivery))});
  p.message.headers.push_back({std::string(kAttemptsHeader), history_text(e.history, ended)});
  return p;
}

std::optional<AmqpPublication> result_publication(const WorkerSettings& settings, const AmqpHeld& e,
                                                  const Outcome& outcome, const std::string& results_queue) {
  AmqpPublication p;
  if (!e.message.reply_to.empty()) {
    p.routing_key = e.message.reply_to;
    p.message.correlation_id = e.message.correlation_id;
  } else if (!results_queue.empty()) {
    p.routing_key = results_queue;
  } else {
    return std::nullopt;
  }
  WorkerSettings with_results = settings;
  with_results.results = true;  // a reply is sent with --no-results too: its requester waits for it
  for (auto& [name, value] : result_fields(with_results, e, outcome)) {
    if (name == "output" || name == "output_b64") continue;  // the body
    p.message.headers.push_back({name, std::move(value)});
  }
  if (!e.message.message_id.empty()) p.message.headers.push_back({"message_id", e.message.message_id});
  if (outcome.output.size() <= settings.results_max_output) p.body = outcome.output;
  return p;
}

AmqpPublication dead_letter_publication(const WorkerSettings& settings, const AmqpHeld& e, const Outcome& outcome,
                                        const std::string& reason, std::int64_t now_ms) {
  const nlohmann::json source = {{"name", settings.keys.stream}, {"message_id", e.message.message_id}};
  const std::string record = dead_letter_record(settings, e, outcome, reason, now_ms, "queue", source);
  AmqpPublication p;
  p.exchange = amqp_queue_names(settings.keys.stream).dlx;
  p.body = e.task.payload;
  p.message = dead_letter_message(e.message, e.task.key, settings.keys.stream,
                                  nlohmann::json::parse(record, nullptr, false));
  p.message.body = {};  // e.message has none: the payload is p.body
  if (settings.fleet_key) {
    p.message.headers.push_back(
        {std::string(kSignatureHeader),
         settings.fleet_key->sign(amqp_queue_names(settings.keys.stream).dlq,
                                  dead_letter_signed_fields(p.message, p.body))});
  }
  return p;
}

SignedFields dead_letter_signed_fields(const AmqpOutgoing& message, std::string_view payload) {
  auto text = [&](std::string_view name) {
    const AmqpValue* v = find_field(message.headers, name);
    const std::string* t = v != nullptr ? v->text() : nullptr;
    return t != nullptr ? *t : std::string();
  };
  SignedFields fields = {{"key", text("key")},
                         {"payload", std::string(payload)},
                         {"entry", message.message_id},
                         {"queue", text("pillbox-queue")},
                         {"record", text("pillbox-record")}};
  // Each signature header as `sig` (two do not verify: FleetKey::verify).
  for (const AmqpField& f : message.headers) {
    if (f.name != kSignatureHeader) continue;
    const std::string* t = f.value.text();
    fields.emplace_back("sig", t != nullptr ? *t : std::string());
  }
  return fields;
}

SignedFields dead_letter_signed_fields(const AmqpMessage& message) {
  AmqpOutgoing as_sent;
  as_sent.message_id = message.message_id;
  as_sent.headers = message.headers;
  return dead_letter_signed_fields(as_sent, message.body);
}

}  // namespace pillbox::broker
