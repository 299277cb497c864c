#include "supervisor/broker/amqp_replay_notice.h"

#include <algorithm>

#include <nlohmann/json.hpp>

#include "supervisor/io/random_hex.h"
#include "supervisor/io/untrusted_json.h"

namespace pillbox::broker {
namespace {

// A notice is a few names: anything near this is not one.
constexpr std::size_t kMaxNoticeBytes = 64u << 10;

bool is_attempt(std::string_view s) {
  return s.size() == 32 && std::all_of(s.begin(), s.end(), [](char c) { return (c >= '0' && c <= '9') || (c >= 'a' && c <= 'f'); });
}

// An offset as parse_amqp_record_id writes it.
bool is_record(std::string_view s) {
  return !s.empty() && s.size() <= 18 && (s == "0" || s[0] != '0') &&
         std::all_of(s.begin(), s.end(), [](char c) { return c >= '0' && c <= '9'; });
}

// The one string header `name`; none when absent, given twice or not a string.
const std::string* only_text(const AmqpTable& headers, std::string_view name) {
  const std::string* found = nullptr;
  for (const AmqpField& f : headers) {
    if (f.name != name) continue;
    if (found != nullptr) return nullptr;
    found = f.value.text();
    if (found == nullptr) return nullptr;
  }
  return found;
}

// A short text of a notice (a worker's name, a message id, a reason): a
// string, at most 4 KiB.
bool short_text(const nlohmann::json& j, const char* name, std::string& out) {
  const auto it = j.find(name);
  if (it == j.end()) return true;
  if (!it->is_string() || it->get_ref<const std::string&>().size() > 4096) return false;
  out = it->get<std::string>();
  return true;
}

}  // namespace

Expected<std::string> new_replay_attempt() { return random_hex(16); }

std::optional<ReplayTag> replay_tag(const AmqpTable& headers) {
  const std::string* attempt = only_text(headers, kReplayHeader);
  const std::string* record = only_text(headers, kReplayOfHeader);
  if (attempt == nullptr || record == nullptr || !is_attempt(*attempt) || !is_record(*record)) return std::nullopt;
  return ReplayTag{*attempt, *record};
}

void add_replay_tag(AmqpTable& headers, const ReplayTag& tag) {
  headers.push_back({std::string(kReplayHeader), tag.attempt});
  headers.push_back({std::string(kReplayOfHeader), tag.record});
}

bool is_replay_tag_header(std::string_view name) { return name == kReplayHeader || name == kReplayOfHeader; }

std::string replay_notice_json(const ReplayNotice& n) {
  const nlohmann::json j = {{"replay", n.tag.attempt},   {"record", n.tag.record},
                            {"worker", n.worker},        {"message_id", n.message_id},
                            {"output_omitted", n.output_omitted}, {"payload_sha256", n.payload_sha256}};
  return j.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
}

AmqpOutgoing replay_notice_message(const std::string& body) {
  AmqpOutgoing m;
  m.body = body;
  m.headers = {{std::string(kReplayOutcomeHeader), std::string("ok")}};
  return m;
}

bool is_replay_notice(const AmqpMessage& message) {
  return find_field(message.headers, kReplayOutcomeHeader) != nullptr;
}

std::optional<ReplayNotice> read_replay_notice(const AmqpMessage& message) {
  const std::string* outcome = only_text(message.headers, kReplayOutcomeHeader);
  if (outcome == nullptr || *outcome != "ok" || message.body_omitted) return std::nullopt;
  auto parsed = parse_untrusted_json(message.body, kMaxNoticeBytes);
  const nlohmann::json& j = parsed.value;
  if (j.is_discarded() || !j.is_object()) return std::nullopt;
  ReplayNotice n;
  if (!short_text(j, "replay", n.tag.attempt) || !short_text(j, "record", n.tag.record) ||
      !is_attempt(n.tag.attempt) || !is_record(n.tag.record) || !short_text(j, "worker", n.worker) ||
      !short_text(j, "message_id", n.message_id) || !short_text(j, "output_omitted", n.output_omitted) ||
      !short_text(j, "payload_sha256", n.payload_sha256)) {
    return std::nullopt;
  }
  return n;
}

}  // namespace pillbox::broker
