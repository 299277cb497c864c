#include "supervisor/serve/console_api.h"

#include <algorithm>
#include <cerrno>
#include <cstdlib>
#include <set>

#include "shared/base64.h"
#include "shared/failure_kind.h"
#include "shared/raise_site.h"
#include "supervisor/metrics/live_run_file.h"
#include "supervisor/ops/filter_text.h"
#include "supervisor/ops/quarantine_views_json.h"
#include "supervisor/ops/task_json.h"

namespace pillbox::serve {
namespace {

// The longest discard reason taken (bytes): it is kept in the audit trail.
constexpr std::size_t kMaxReasonBytes = 4096;

// The parameters of `query`, each given at most once and named in
// `allowed`, empty values dropped; an error names what is allowed.
Expected<std::map<std::string, std::string>> read_query(const Query& query, const std::set<std::string>& allowed) {
  std::string names;
  for (const auto& name : allowed) names += (names.empty() ? "" : ", ") + name;
  std::map<std::string, std::string> values;
  for (const auto& [name, value] : query) {
    if (allowed.count(name) == 0) {
      return Error{"unknown parameter '" + name + "' (allowed: " + names + ")", ErrorCode::kUsage};
    }
    if (!values.emplace(name, value).second) {
      return Error{"parameter '" + name + "' given twice", ErrorCode::kUsage};
    }
  }
  for (auto it = values.begin(); it != values.end();) it = it->second.empty() ? values.erase(it) : std::next(it);
  return values;
}

std::optional<std::string> take(std::map<std::string, std::string>& values, const std::string& name) {
  const auto it = values.find(name);
  if (it == values.end()) return std::nullopt;
  return it->second;
}

// The parameter `name`, when given: a whole number from 0 to `max`, into
// `field`. The error is a usage error.
Status take_whole_number(std::map<std::string, std::string>& values, const std::string& name, std::int64_t max,
                         std::int64_t& field) {
  const auto text = take(values, name);
  if (!text) return Status::ok();
  char* end = nullptr;
  errno = 0;
  const long long n = std::strtoll(text->c_str(), &end, 10);
  if (*end != '\0' || n < 0 || n > max || errno != 0) {
    return Status::error(name + " expects a whole number from 0 to " + std::to_string(max) + ", got '" + *text + "'",
                         ErrorCode::kUsage);
  }
  field = static_cast<std::int64_t>(n);
  return Status::ok();
}

}  // namespace

ApiReply error_reply(int status, const std::string& message) { return {status, {{"error", message}}}; }

ApiReply failure_reply(const std::string& message, ErrorCode code, int usage_status) {
  return error_reply(code == ErrorCode::kUsage ? usage_status : 500, message);
}

Expected<std::int64_t> record_id(const std::string& text) {
  char* end = nullptr;
  errno = 0;
  const long long id = std::strtoll(text.c_str(), &end, 10);
  // Digits only: strtoll also takes a sign and any leading whitespace, and
  // c_str() ends at an embedded NUL.
  const bool digits = std::all_of(text.begin(), text.end(), [](char c) { return c >= '0' && c <= '9'; });
  if (text.empty() || text.size() > 19 || !digits || *end != '\0' || id <= 0 || errno != 0) {
    return Error{"no quarantine record '" + text.substr(0, 40) + "' (an id is a positive number)", ErrorCode::kUsage};
  }
  return static_cast<std::int64_t>(id);
}

Expected<store::ListFilter> records_filter(const Query& query, bool paging) {
  std::set<std::string> allowed = {"status", "kind", "fingerprint", "handler", "key", "source", "raise_site"};
  if (paging) allowed.insert({"limit", "offset"});
  auto values = read_query(query, allowed);
  if (!values) return Error{values.error(), values.error_code()};
  store::ListFilter filter;
  if (auto s = take(*values, "status")) {
    auto status = record_status_filter(*s);
    if (!status) return Error{status.error(), status.error_code()};
    filter.status = *status;
  }
  if (auto k = take(*values, "kind")) {
    if (!kind_from_string(*k)) {
      std::string kinds;
      for (Kind kind : kAllKinds) kinds += (kinds.empty() ? "" : ", ") + std::string(to_string(kind));
      return Error{"unknown kind '" + *k + "' (" + kinds + ")", ErrorCode::kUsage};
    }
    filter.kind = *k;
  }
  if (auto text = take(*values, "source")) {
    auto source = record_source_filter(*text);
    if (!source) return Error{source.error(), source.error_code()};
    filter.source = *source;
  }
  filter.fingerprint = take(*values, "fingerprint");
  filter.handler = take(*values, "handler");
  filter.key = take(*values, "key");
  if (auto site = take(*values, "raise_site"); site && !site->empty()) {
    if (!is_raise_site_id(*site)) {
      return Error{"raise_site is a raise site's id, rs- and 16 hex digits (the Fingerprints page shows them)",
                   ErrorCode::kUsage};
    }
    filter.raise_site = *site;
  }
  if (paging) {
    filter.limit = kMaxPage;
    if (auto s = take_whole_number(*values, "limit", kMaxPage, filter.limit); !s) return Error::usage(s.message());
    if (auto s = take_whole_number(*values, "offset", std::int64_t{1} << 40, filter.offset); !s) {
      return Error::usage(s.message());
    }
  }
  return filter;
}

Expected<store::TaskFilter> tasks_filter(const Query& query) {
  auto values = read_query(query, {"state", "key", "handler", "limit"});
  if (!values) return Error{values.error(), values.error_code()};
  store::TaskFilter filter;
  if (auto s = take(*values, "state")) {
    auto view = task_state_filter(*s);
    if (!view) return Error{view.error(), view.error_code()};
    filter.view = *view;
  }
  filter.key = take(*values, "key");
  filter.handler = take(*values, "handler");
  filter.limit = kMaxPage;
  if (auto s = take_whole_number(*values, "limit", kMaxPage, filter.limit); !s) return Error::usage(s.message());
  return filter;
}

ApiReply live_runs(ConsoleStore& s) {
  // The files of runs that are gone are deleted on the way: no one else will.
  return {200, {{"runs", metrics::read_live_runs(s.dir, true)}}};
}

ApiReply list_tasks(ConsoleStore& s, const Query& query) {
  auto filter = tasks_filter(query);
  if (!filter) return failure_reply(filter.error(), filter.error_code());
  const std::int64_t now = store::now_ms();
  nlohmann::json tasks = nlohmann::json::array();
  const Status each = store::each_task(s.db, *filter, [&](const store::TaskRow& r) {
    tasks.push_back(task_json(r, now));
    return true;
  });
  if (!each) return error_reply(500, each.message());
  return {200, {{"tasks", std::move(tasks)}}};
}

DiscardReason discard_reason(const std::string& body) {
  const auto j = nlohmann::json::parse(body, nullptr, false);  // invalid UTF-8 is a parse error
  if (j.is_discarded() || !j.is_object() || !j.contains("reason") || !j["reason"].is_string()) {
    return {std::nullopt,
            error_reply(400, "the body must be a JSON object {\"reason\": TEXT} (the reason goes into the audit trail)")};
  }
  std::string reason = j["reason"].get<std::string>();
  if (reason.empty() || reason.size() > kMaxReasonBytes) {
    return {std::nullopt, error_reply(400, "the reason must be 1 to " + std::to_string(kMaxReasonBytes) + " bytes of text")};
  }
  return {std::move(reason), {}};
}

namespace {

// {KEY: [{"id", "was"}], ALREADY_KEY: [ID], "changed": N} for one record.
ApiReply status_change_reply(const char* key, const char* already_key, const nlohmann::json& id, bool already,
                             const std::string& was) {
  nlohmann::json changed = nlohmann::json::array();
  nlohmann::json left = nlohmann::json::array();
  if (already) {
    left.push_back(id);
  } else {
    changed.push_back({{"id", id}, {"was", was}});
  }
  return {200, {{key, changed}, {already_key, left}, {"changed", already ? 0 : 1}}};
}

}  // namespace

ApiReply discarded_reply(const nlohmann::json& id, bool already, const std::string& was) {
  return status_change_reply("discarded", "already_discarded", id, already, was);
}

AllowBody allow_body(const std::string& body) {
  const char* shape = "the body must be a JSON object {\"note\": TEXT, \"revoke\": true|false} (both optional)";
  const auto j = nlohmann::json::parse(body.empty() ? std::string("{}") : body, nullptr, false);
  if (j.is_discarded() || !j.is_object()) return {std::nullopt, error_reply(400, shape)};
  for (const auto& [name, value] : j.items()) {
    const bool known = (name == "note" && value.is_string()) || (name == "revoke" && value.is_boolean());
    if (!known) return {std::nullopt, error_reply(400, std::string(shape) + "; not this: '" + name.substr(0, 40) + "'")};
  }
  AllowRequest request;
  request.note = j.value("note", "");
  if (request.note.size() > kMaxReasonBytes) {
    return {std::nullopt, error_reply(400, "the note must be at most " + std::to_string(kMaxReasonBytes) + " bytes")};
  }
  request.review = j.value("revoke", false) ? store::Review::kRevoke : store::Review::kAllow;
  return {std::move(request), {}};
}

ApiReply reviewed_reply(store::Review review, const nlohmann::json& id, bool already, const std::string& was) {
  return review == store::Review::kAllow ? status_change_reply("allowed", "already_allowed", id, already, was)
                                         : status_change_reply("revoked", "not_allowed", id, already, was);
}

PatchBody patch_body(const std::string& body) {
  const char* shape =
      "the body must be a JSON object {\"note\": TEXT, \"payload_b64\": BASE64} or {\"note\": TEXT, "
      "\"set_args\": {\"K\": \"V\", ...}}";
  auto refused = [](int status, const std::string& why) { return PatchBody{std::nullopt, error_reply(status, why)}; };
  const auto j = nlohmann::json::parse(body, nullptr, false);  // invalid UTF-8 is a parse error
  if (j.is_discarded() || !j.is_object()) return refused(400, shape);
  for (const auto& [name, value] : j.items()) {
    if (name != "note" && name != "payload_b64" && name != "set_args") {
      return refused(400, std::string(shape) + "; unknown field '" + name.substr(0, 40) + "'");
    }
  }
  if (!j.contains("note") || !j["note"].is_string()) return refused(400, std::string(shape) + "; the note (why) is required");
  PatchRequest request;
  request.note = j["note"].get<std::string>();
  if (j.contains("payload_b64")) {
    if (!j["payload_b64"].is_string()) return refused(400, std::string(shape) + "; payload_b64 is a string");
    const std::string& b64 = j["payload_b64"].get_ref<const std::string&>();
    if (b64.size() / 4 * 3 > kMaxWebPatchPayloadBytes + 2) return refused(413, kPatchTooLarge);
    auto bytes = base64_decode(b64);
    if (!bytes) return refused(400, "payload_b64 is not base64 (RFC 4648, with padding, no whitespace)");
    if (bytes->size() > kMaxWebPatchPayloadBytes) return refused(413, kPatchTooLarge);
    request.payload = std::move(*bytes);
  }
  if (j.contains("set_args")) {
    if (!j["set_args"].is_object()) return refused(400, std::string(shape) + "; set_args is an object");
    for (const auto& [key, value] : j["set_args"].items()) {
      if (!value.is_string()) return refused(400, "set_args values are strings (argument '" + key.substr(0, 40) + "')");
      request.set_args.emplace_back(key, value.get<std::string>());
    }
    // {} sets nothing: said as patch_record says "neither".
  }
  return {std::move(request), {}};
}

}  // namespace pillbox::serve
