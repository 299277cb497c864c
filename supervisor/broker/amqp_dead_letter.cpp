#include "supervisor/broker/amqp_dead_letter.h"

#include <string_view>

#include "supervisor/broker/amqp_death.h"
#include "supervisor/broker/amqp_replay_notice.h"
#include "supervisor/broker/dead_letter_fit.h"
#include "supervisor/io/untrusted_json.h"

namespace pillbox::broker {
namespace {

constexpr std::string_view kRecord = kRecordHeader;
constexpr std::string_view kOriginal = "pillbox-original";
constexpr std::string_view kXDeath = "pillbox-x-death";
constexpr std::string_view kQueue = "pillbox-queue";

std::string dumped(const nlohmann::json& j) { return j.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace); }

// `j` as header text, or, over kMaxDeadLetterJson, what says it was left out.
std::string bounded(const nlohmann::json& j, std::string_view what) {
  std::string text = dumped(j);
  if (text.size() <= kMaxDeadLetterJson) return text;
  return dumped({{"omitted", std::string(what) + " of " + std::to_string(text.size()) + " bytes, over the " +
                                 std::to_string(kMaxDeadLetterJson) + " a dead letter's header may hold"}});
}

// A property or header name AMQP can carry as pillbox sends it: 1-255
// bytes, no NUL (amqp_connection.h's check).
bool sendable(const std::string& s) { return !s.empty() && s.size() <= 255 && s.find('\0') == std::string::npos; }

const std::string* text_header(const AmqpTable& headers, std::string_view name) {
  const AmqpValue* v = find_field(headers, name);
  return v != nullptr ? v->text() : nullptr;
}

}  // namespace

AmqpOutgoing dead_letter_message(const AmqpMessage& original, const std::string& key, const std::string& queue,
                                 const nlohmann::json& record) {
  AmqpOutgoing m;
  m.body = original.body;
  if (sendable(original.message_id)) m.message_id = original.message_id;
  if (sendable(original.correlation_id)) m.correlation_id = original.correlation_id;
  // The original's scalar headers, as a stream keeps them, while they
  // take at most kMaxCarriedHeaders (all are in pillbox-original).
  std::size_t carried = 0;
  for (const AmqpField& f : original.headers) {
    if (!sendable(f.name) || f.name.rfind("x-", 0) == 0 || f.name.rfind("pillbox-", 0) == 0 || f.name == "key") continue;
    if (f.value.kind == 'A' || f.value.kind == 'F') continue;  // in pillbox-original, as JSON
    carried += f.name.size() + 16 + (f.value.text() != nullptr ? f.value.text()->size() : 0);
    if (carried > kMaxCarriedHeaders) break;
    if (const auto* d = std::get_if<AmqpDecimal>(&f.value.value)) {
      m.headers.push_back({f.name, decimal_text(*d)});
      continue;
    }
    m.headers.push_back(f);
  }
  // A replayed message's tag goes on as headers of the dead letter's own,
  // whatever room the others left: the replay finds how it ended by them
  // (amqp_replay_notice.h). Only a tag of its form: anything else a
  // publisher put under pillbox-* stays in pillbox-original only.
  if (auto tag = replay_tag(original.headers)) add_replay_tag(m.headers, *tag);
  const nlohmann::json as_came = {{"message_id", original.message_id},
                                  {"correlation_id", original.correlation_id},
                                  {"reply_to", original.reply_to},
                                  {"headers", to_json(original.headers)},
                                  {"headers_cut", original.headers_cut}};
  m.headers.push_back({"key", key});
  m.headers.push_back({std::string(kQueue), queue});
  m.headers.push_back({std::string(kRecord), bounded(record, "the record")});
  m.headers.push_back({std::string(kOriginal), bounded(as_came, "the original message's properties")});
  m.headers.push_back({std::string(kXDeath), bounded(to_json(deaths_of(original.headers)), "RabbitMQ's x-death")});
  return m;
}

AmqpDeadLetter read_dead_letter(const AmqpMessage& message) {
  AmqpDeadLetter d;
  d.payload = message.body;
  d.message_id = message.message_id;
  d.key = message.key ? *message.key : message.message_id;
  const AmqpTable& h = message.headers;
  if (const std::string* q = text_header(h, kQueue)) {
    d.queue = *q;
  } else if (const std::string* first = text_header(h, "x-first-death-queue")) {
    d.queue = *first;
  }
  if (const std::string* r = text_header(h, "x-first-death-reason")) d.first_death_reason = *r;
  if (const std::string* q = text_header(h, "x-first-death-queue")) d.first_death_queue = *q;
  if (const AmqpValue* offset = find_field(h, "x-stream-offset"); offset != nullptr && offset->integer()) {
    d.offset = *offset->integer();
  }
  auto part = [&](std::string_view name, nlohmann::json& into) {
    const AmqpValue* v = find_field(h, name);
    if (v == nullptr) return;
    const std::string* text = v->text();
    if (text == nullptr) {
      d.unreadable += (d.unreadable.empty() ? "" : "; ") + std::string(name) + ": not a string";
      return;
    }
    auto parsed = parse_untrusted_json(*text, kMaxDeadLetterJson);
    if (parsed.value.is_discarded() || !parsed.value.is_object()) {
      d.unreadable += (d.unreadable.empty() ? "" : "; ") + std::string(name) + ": " +
                      (parsed.why_not.empty() ? "not a JSON object" : parsed.why_not);
      return;
    }
    into = std::move(parsed.value);
  };
  part(kRecord, d.record);
  part(kOriginal, d.original);
  part(kXDeath, d.x_death);
  return d;
}

std::string canary_queue_name(const std::string& queue, const std::string& id) { return queue + ".doctor." + id; }

bool is_canary(const AmqpMessage& message, const std::string& queue) {
  const std::string* id = text_header(message.headers, kCanaryHeader);
  const std::string* first_queue = text_header(message.headers, "x-first-death-queue");
  const std::string* reason = text_header(message.headers, "x-first-death-reason");
  return id != nullptr && first_queue != nullptr && reason != nullptr && *reason == "expired" &&
         *first_queue == canary_queue_name(queue, *id);
}

}  // namespace pillbox::broker
