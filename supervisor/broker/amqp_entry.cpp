#include "supervisor/broker/amqp_entry.h"

#include <algorithm>
#include <map>
#include <nlohmann/json.hpp>
#include <utility>

#include "shared/sha256.h"
#include "supervisor/broker/amqp_dead_letter.h"
#include "supervisor/broker/amqp_replay_notice.h"
#include "supervisor/broker/amqp_state_log.h"
#include "supervisor/broker/amqp_topology.h"
#include "supervisor/broker/dead_letter_fit.h"
#include "supervisor/io/untrusted_json.h"

namespace pillbox::broker {
namespace {

bool is_history_header(std::string_view name) { return name == kAttemptsHeader || name == kDeliveriesHeader; }

std::string dumped(const nlohmann::json& j) { return j.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace); }

// A name AMQP sends as pillbox sends it (amqp_connection.h): 1 to 255
// bytes, no NUL.
bool sendable(std::string_view s) { return !s.empty() && s.size() <= 255 && s.find('\0') == std::string_view::npos; }

// RabbitMQ's sender-selected distribution: a published message is routed
// to the queues these name as well (case-sensitive; CC stays on the
// delivered message).
bool routes_elsewhere(std::string_view name) { return name == "CC" || name == "BCC"; }

// A header of the message that its copy carries on: not the broker's own
// (x-delivery-count, x-death, x-first-death-*: its to write again; a copy
// that carried them would claim them), nor one that routes the copy to
// other queues, nor one whose name cannot be sent.
bool copied(const AmqpField& f) { return f.name.rfind("x-", 0) != 0 && !routes_elsewhere(f.name) && sendable(f.name); }


// The headers a message's publication may take (a frame of 131072 bytes,
// less its framing and the properties: three ids of up to 255 bytes).
constexpr std::size_t kMaxPublishedHeaders = 127u << 10;
// The most a history record of the delivery a copy ends takes written short.
constexpr std::size_t kMaxShortRecord = 256;

// A record as short as it can be written and read back the same for what
// judging needs (entry_history, engine_history): its delivery, kind,
// fingerprint, and charged, transient, started and suspect where they are
// not parse_delivery's defaults. (Without `suspect`, a suspect given back a
// few hundred times, its history written short, was one no more: it ran
// beside others again, and they died with it if it was a killer.)
std::string short_json(const RecordedDelivery& d) {
  nlohmann::json j = {{"delivery", d.delivery}};
  if (!d.kind.empty()) j["kind"] = d.kind;
  if (!d.fingerprint.empty()) j["fingerprint"] = d.fingerprint;
  if (!d.charged) j["charged"] = false;
  if (d.transient) j["transient"] = true;
  if (d.started) j["started"] = true;
  if (d.keeps_suspicion) j["suspect"] = true;
  return dumped(j);
}

// The bytes of `history`'s records written short, as an array with a
// record more (the one a copy adds) of at most kMaxShortRecord.
std::size_t shortest_history(const EntryHistory& history) {
  std::size_t size = 2 + kMaxShortRecord;
  for (const RecordedDelivery& d : history.recorded) size += short_json(d).size() + 1;
  for (const RecordedDelivery& d : history.lost_starts) size += short_json(d).size() + 1;
  return size;
}

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
  // nlohmann's parser stops at a NUL: what follows would be read by no one.
  if (text->find('\0') != std::string::npos) {
    h.unreadable = std::string(kAttemptsHeader) + " holds a NUL byte";
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
    // No start marker can be written on RabbitMQ: pillbox writes none.
    if (d.contains("started")) {
      h.unreadable = std::string(kAttemptsHeader) + " holds a start marker (delivery " + std::to_string(*n) +
                     "), which pillbox never writes on RabbitMQ";
      return h;
    }
    h.records[static_cast<std::uint32_t>(*n)] = dumped(d);
  }
  // A copy carries the record of the delivery it was made at.
  if (carried > 0 && h.records.count(static_cast<std::uint32_t>(carried)) == 0) {
    h.unreadable = std::string(kAttemptsHeader) + " holds no record of delivery " + std::to_string(carried) +
                   ", the one its copy was made at";
  }
  return h;
}

// The history header a copy carries: every record. Over
// kMaxCarriedHistory, the oldest records lose their message and crash
// state first, then are written short (short_json), the one this copy ends
// last (never a whole record: a delivery without one would read as lost).
// Each record is written once or twice per step, never the whole text
// again: linear in the records. check_message refuses a message whose
// history would not fit even short.
std::string history_text(const EntryHistory& history, const RecordedDelivery& ended) {
  std::vector<RecordedDelivery> records = history.recorded;
  records.insert(records.end(), history.lost_starts.begin(), history.lost_starts.end());
  std::sort(records.begin(), records.end(),
            [](const RecordedDelivery& a, const RecordedDelivery& b) { return a.delivery < b.delivery; });
  records.push_back(ended);
  std::vector<std::string> texts;
  texts.reserve(records.size());
  std::size_t size = 1 + records.size();  // the brackets and commas
  for (const RecordedDelivery& d : records) size += texts.emplace_back(delivery_json(d)).size();
  auto rewrite = [&](std::size_t i, std::string text) {
    size = size - texts[i].size() + text.size();
    texts[i] = std::move(text);
  };
  for (std::size_t i = 0; size > kMaxCarriedHistory && i < records.size(); ++i) {
    if (records[i].message.empty() && records[i].crash_state.empty()) continue;
    records[i].message.clear();
    records[i].crash_state.clear();
    rewrite(i, delivery_json(records[i]));
  }
  for (std::size_t i = 0; size > kMaxCarriedHistory && i < records.size(); ++i) rewrite(i, short_json(records[i]));
  std::string text = "[";
  text.reserve(size);
  for (std::size_t i = 0; i < texts.size(); ++i) text += (i > 0 ? "," : "") + texts[i];
  return text + "]";
}

Refused unreadable_history(const WorkerSettings& settings, const AmqpHeld& e) {
  return {protocol_error("message " + e.id + ": its delivery history (" + std::string(kAttemptsHeader) + ", " +
                             std::string(kDeliveriesHeader) + ") is not pillbox's: " + e.history_unreadable +
                             "; its deliveries cannot be judged",
                         settings.identity.handler_identity),
          "history not readable: not run"};
}

// Whether `name` is one of the fleet's own queues (NAME, NAME.dlq, a delay
// queue NAME.delay.MS) or its exchange: never a reply's destination.
bool fleet_queue(const WorkerSettings& settings, const std::string& name) {
  const AmqpQueueNames names = amqp_queue_names(settings.keys.stream);
  return name == names.work || name == names.dlq || name == names.dlx ||
         name.rfind(settings.keys.stream + ".delay.", 0) == 0;
}

// Whether `e`'s result goes to its reply_to. (check_message refuses a
// reply_to that cannot be sent or names the fleet's own queues; unchecked,
// such a one is no reply_to.)
bool replies(const WorkerSettings& settings, const AmqpHeld& e) {
  return sendable(e.message.reply_to) && !fleet_queue(settings, e.message.reply_to);
}

// Why what a worker publishes of `e` (its copy, its reply) could not be
// sent or would do more than it says, or nullopt: an id or a header name
// AMQP cannot carry as pillbox sends it (a copy or reply the client refuses
// to send); a reply_to that names the fleet's own queues (a result in NAME
// runs as a task, whose reply runs again: for ever); own headers a copy
// could not carry with its history in one frame; a history that has no
// room left for one more delivery (its next copy could not carry it). Each
// is the publisher's doing: refused unrun, a protocol error.
std::optional<Refused> unsendable(const WorkerSettings& settings, const AmqpHeld& e) {
  const std::string& handler = settings.identity.handler_identity;
  auto refuse = [&](const std::string& why) {
    return Refused{protocol_error("message " + e.id + ": " + why, handler), "message pillbox cannot carry on: not run"};
  };
  const AmqpMessage& m = e.message;
  for (const auto& [what, value] : {std::pair{"message_id", &m.message_id}, std::pair{"correlation_id", &m.correlation_id},
                                    std::pair{"reply_to", &m.reply_to}}) {
    if (!value->empty() && !sendable(*value)) {
      return refuse(std::string("its ") + what + " is not 1 to 255 bytes without NUL: a copy or reply of it cannot be sent");
    }
  }
  if (!m.reply_to.empty() && fleet_queue(settings, m.reply_to)) {
    return refuse("its reply_to names the fleet's own queue " + m.reply_to + ": pillbox replies to none of them");
  }
  std::size_t own = 4;
  for (const AmqpField& f : m.headers) {
    if (f.name.rfind("x-", 0) == 0 || routes_elsewhere(f.name)) continue;
    if (!sendable(f.name)) return refuse("a header's name is not 1 to 255 bytes without NUL: a copy of it cannot be sent");
    // A decimal goes on a copy as its text (carried_copy), up to 257 bytes.
    const auto* d = std::get_if<AmqpDecimal>(&f.value.value);
    own += d != nullptr ? wire_size(AmqpField{f.name, decimal_text(*d)}) : wire_size(f);
  }
  if (own > kMaxCopiedHeaders) {
    return refuse("its headers take " + std::to_string(own) + " bytes, over the " + std::to_string(kMaxCopiedHeaders) +
                  " a copy carries beside its history in one AMQP frame");
  }
  if (const std::size_t history = shortest_history(e.history); history > kMaxCarriedHistory) {
    return refuse("its history of " + std::to_string(e.history.recorded.size()) + " recorded deliveries takes " +
                  std::to_string(history) + " bytes written short with one more, over the " +
                  std::to_string(kMaxCarriedHistory) + " a copy carries: delivered more often than a message can say");
  }
  return std::nullopt;
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
  // A history that is not pillbox's stays where it was: a copy of the
  // message (given back unchecked) carries it on as it came, and the next
  // worker refuses it alike; its dead letter's pillbox-original shows it.
  const bool has_history = std::any_of(m.headers.begin(), m.headers.end(),
                                       [](const AmqpField& f) { return is_history_header(f.name); });
  const AmqpTable as_came = has_history ? m.headers : AmqpTable();
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
  if (!e.history_unreadable.empty()) {
    m.headers = as_came;
    e.history = EntryHistory{};
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
  if (auto refused = unsendable(settings, e)) return refused;
  if (kills_workers(settings, e)) {
    return Refused{workers_lost(e.history.lost.size(), handler,
                                "each died, or lost its connection to RabbitMQ, while it ran this message"),
                   std::to_string(e.history.lost.size()) + " deliveries never reported back: it kills workers; not run again",
                   false};
  }
  // The broker's x-delivery-limit counts the deliveries of one message; a
  // copy (a suspect given back, a retry) starts at 0 again. The ones that
  // never reported back ride on the copies, so the same limit is kept
  // here across them: without it, two payloads that kill every worker,
  // giving each other back in turn, would never reach the broker's.
  const std::size_t unreported = e.history.lost.size() + e.history.unstarted.size();
  if (const auto limit = static_cast<std::size_t>(worker_delivery_limit(settings.retry.max_attempts));
      unreported > limit) {
    return Refused{workers_lost(unreported, handler,
                                "each died, or lost its connection to RabbitMQ, while it held this message; past the "
                                "delivery limit of " + std::to_string(limit) + ", counted across pillbox's copies"),
                   std::to_string(unreported) + " deliveries never reported back: past the delivery limit; not run again",
                   false};
  }
  return std::nullopt;
}

std::vector<std::string> stream_breaking_headers(const AmqpMessage& m) {
  std::vector<std::string> names;
  for (const AmqpField& f : m.headers) {
    if (std::holds_alternative<AmqpDecimal>(f.value.value)) names.push_back(f.name);
  }
  return names;
}

AmqpPublication carried_copy(const AmqpHeld& e, const RecordedDelivery& ended, const std::string& queue) {
  AmqpPublication p;
  p.routing_key = queue;
  p.body = e.task.payload;
  // (check_message refuses a message whose ids or headers cannot be sent;
  // one given back unchecked loses them rather than its copy.)
  if (sendable(e.message.message_id)) p.message.message_id = e.message.message_id;
  if (sendable(e.message.correlation_id)) p.message.correlation_id = e.message.correlation_id;
  if (sendable(e.message.reply_to)) p.message.reply_to = e.message.reply_to;
  for (const AmqpField& f : e.message.headers) {
    if (!copied(f)) continue;
    // A key header that is not text is no key: the one added below is (a
    // decimal one sent as text would become the copy's key).
    if (!e.message.key && f.name == "key") continue;
    if (const auto* d = std::get_if<AmqpDecimal>(&f.value.value)) {
      p.message.headers.push_back({f.name, decimal_text(*d)});  // stream_breaking_headers
    } else {
      p.message.headers.push_back(f);
    }
  }
  // Its key stays its key: a header (its message id may be left out above).
  if (!e.message.key) p.message.headers.push_back({"key", e.task.key});
  // A history that is not pillbox's is carried as it came (read_message
  // left it in the headers): a copy never makes it pillbox's.
  if (!e.history_unreadable.empty()) return p;
  p.message.headers.push_back({std::string(kDeliveriesHeader), AmqpValue(static_cast<std::int64_t>(ended.delivery))});
  p.message.headers.push_back({std::string(kAttemptsHeader), history_text(e.history, ended)});
  return p;
}

std::optional<AmqpPublication> result_publication(const WorkerSettings& settings, const AmqpHeld& e,
                                                  const Outcome& outcome, const std::string& results_queue) {
  AmqpPublication p;
  if (replies(settings, e)) {
    p.routing_key = e.message.reply_to;
    if (sendable(e.message.correlation_id)) p.message.correlation_id = e.message.correlation_id;
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

std::optional<AmqpPublication> replay_notice_publication(const WorkerSettings& settings, const AmqpHeld& e,
                                                         const Outcome& outcome) {
  auto tag = replay_tag(e.message.headers);
  if (!tag) return std::nullopt;
  ReplayNotice notice{std::move(*tag), settings.consumer.name, e.message.message_id,
                      output_omitted_reason(settings, outcome), sha256_hex(e.task.payload)};
  // With no result anywhere, its output is in none: said, so that the
  // replay does not send its operator looking for one.
  if (notice.output_omitted.empty() && !settings.results && !replies(settings, e)) {
    notice.output_omitted = "no result kept: the worker runs with --no-results and the message has no reply_to";
  }
  AmqpPublication p;
  p.routing_key = amqp_state_log_name(settings.keys.stream);
  p.body = replay_notice_json(notice);
  p.message = replay_notice_message(p.body);
  p.message.body = {};  // it viewed p.body, which moves with p: set again when sent
  p.notice = true;
  return p;
}

AmqpPublication dead_letter_publication(const WorkerSettings& settings, const AmqpHeld& e, const Outcome& outcome,
                                        const std::string& reason, std::int64_t now_ms) {
  const nlohmann::json source = {{"name", settings.keys.stream}, {"message_id", e.message.message_id}};
  const std::string record = fitted_record(dead_letter_record(settings, e, outcome, reason, now_ms, "queue", source),
                                            kMaxDeadLetterJson, "one AMQP frame");
  AmqpPublication p;
  p.exchange = amqp_queue_names(settings.keys.stream).dlx;
  p.body = e.task.payload;
  p.message = dead_letter_message(e.message, e.task.key, settings.keys.stream,
                                  nlohmann::json::parse(record, nullptr, false));
  p.message.body = {};  // e.message has none: the payload is p.body
  // A CC or BCC the original carried (of any type) would route the dead
  // letter elsewhere too, or have the broker refuse it.
  std::erase_if(p.message.headers, [](const AmqpField& f) { return routes_elsewhere(f.name); });
  // The original's own headers give way when the whole would not fit one
  // frame (a key near a frame's size: all are in pillbox-original, or said
  // to be omitted).
  std::size_t size = 4 + 128;  // the table, and the signature to come
  for (const AmqpField& f : p.message.headers) size += wire_size(f);
  if (size > kMaxPublishedHeaders) {
    std::erase_if(p.message.headers, [](const AmqpField& f) { return f.name != "key" && f.name.rfind("pillbox-", 0) != 0; });
  }
  if (settings.fleet_key) {
    p.message.headers.push_back(
        {std::string(kSignatureHeader),
         settings.fleet_key->sign(amqp_queue_names(settings.keys.stream).dlq,
                                  dead_letter_signed_fields(p.message, p.body))});
  }
  return p;
}

namespace {

// The fields as read_dead_letter reads them (amqp_dead_letter.cpp): `key`
// is the reader's key (the first header key when it is a string, else the
// message id), the queue pillbox-queue's text, else the broker's
// x-first-death-queue; each of pillbox's parts the first header's text.
// What an operator reads is what is signed: a letter whose key header is
// taken away, or made another type, reads another key, and does not verify.
SignedFields signed_fields(std::string key, std::string_view payload, const std::string& message_id,
                           const AmqpTable& headers) {
  auto text = [&](std::string_view name) -> const std::string* {
    const AmqpValue* v = find_field(headers, name);
    return v != nullptr ? v->text() : nullptr;
  };
  auto or_empty = [](const std::string* t) { return t != nullptr ? *t : std::string(); };
  const std::string* queue = text("pillbox-queue");
  if (queue == nullptr) queue = text("x-first-death-queue");
  SignedFields fields = {{"key", std::move(key)},
                         {"payload", std::string(payload)},
                         {"entry", message_id},
                         {"queue", or_empty(queue)},
                         {"record", or_empty(text(kRecordHeader))},
                         {"original", or_empty(text("pillbox-original"))},
                         {"x_death", or_empty(text("pillbox-x-death"))}};
  // Each signature header as `sig` (two do not verify: FleetKey::verify).
  for (const AmqpField& f : headers) {
    if (f.name != kSignatureHeader) continue;
    const std::string* t = f.value.text();
    fields.emplace_back("sig", t != nullptr ? *t : std::string());
  }
  return fields;
}

}  // namespace

SignedFields dead_letter_signed_fields(const AmqpOutgoing& message, std::string_view payload) {
  // The key as message_of will read it on the way back.
  const AmqpValue* key = find_field(message.headers, "key");
  const std::string* text = key != nullptr ? key->text() : nullptr;
  return signed_fields(text != nullptr ? *text : message.message_id, payload, message.message_id, message.headers);
}

SignedFields dead_letter_signed_fields(const AmqpMessage& message) {
  return signed_fields(message.key ? *message.key : message.message_id, message.body, message.message_id,
                       message.headers);
}

}  // namespace pillbox::broker
