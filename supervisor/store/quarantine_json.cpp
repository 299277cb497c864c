#include "supervisor/store/quarantine_json.h"

#include <ctime>
#include <nlohmann/json.hpp>

#include "supervisor/classify/outcome_json.h"

namespace pillbox {
namespace {

nlohmann::json parse_or_string(const std::string& text) {
  auto j = nlohmann::json::parse(text, nullptr, false);
  return j.is_discarded() ? nlohmann::json(text) : j;
}

}  // namespace

std::string iso_time(std::int64_t ms) {
  const std::time_t seconds = static_cast<std::time_t>(ms / 1000);
  std::tm tm {};
  ::gmtime_r(&seconds, &tm);
  char buf[40];
  const std::size_t n = std::strftime(buf, sizeof buf, "%Y-%m-%dT%H:%M:%S", &tm);
  char out[64];
  std::snprintf(out, sizeof out, "%.*s.%03dZ", static_cast<int>(n), buf, static_cast<int>(ms % 1000));
  return out;
}

std::optional<std::int64_t> parse_iso_time(std::string_view text) {
  // YYYY-MM-DDTHH:MM:SS.mmmZ, digit for digit.
  constexpr std::string_view kForm = "dddd-dd-ddTdd:dd:dd.dddZ";
  if (text.size() != kForm.size()) return std::nullopt;
  for (std::size_t i = 0; i < kForm.size(); ++i) {
    const bool digit = text[i] >= '0' && text[i] <= '9';
    if (kForm[i] == 'd' ? !digit : text[i] != kForm[i]) return std::nullopt;
  }
  auto n = [&](std::size_t at, std::size_t len) {
    int v = 0;
    for (std::size_t i = at; i < at + len; ++i) v = v * 10 + (text[i] - '0');
    return v;
  };
  std::tm tm{};
  tm.tm_year = n(0, 4) - 1900;
  tm.tm_mon = n(5, 2) - 1;
  tm.tm_mday = n(8, 2);
  tm.tm_hour = n(11, 2);
  tm.tm_min = n(14, 2);
  tm.tm_sec = n(17, 2);
  if (tm.tm_mon > 11 || tm.tm_mday < 1 || tm.tm_mday > 31 || tm.tm_hour > 23 || tm.tm_min > 59 || tm.tm_sec > 60) {
    return std::nullopt;
  }
  const std::time_t seconds = ::timegm(&tm);
  if (seconds < 0) return std::nullopt;
  return static_cast<std::int64_t>(seconds) * 1000 + n(20, 3);
}

std::string quarantine_record_json(const store::QuarantineRecord& r, std::uint32_t attempts, bool new_fingerprint,
                                   const std::string& store_dir, const std::vector<store::AttemptTally>* tally) {
  using nlohmann::json;
  const store::QuarantineEntry& e = r.entry;
  json j;
  j["id"] = r.id;
  j["key"] = e.key;
  j["status"] = std::string(to_string(r.status));
  put_outcome_record(e, j);
  j["handler"] = e.handler;
  j["handler_identity"] = e.handler_identity;
  j["handler_args"] = parse_or_string(e.handler_args);
  j["exec_argv"] = parse_or_string(e.exec_argv);
  // Absent for handlers and for exec records made before pillbox kept it.
  if (!e.working_dir.empty()) j["working_dir"] = e.working_dir;
  j["policy_identity"] = e.policy_identity;
  j["payload_sha256"] = e.payload_sha256;
  j["payload_size"] = e.payload_size;
  j["source"] = e.source;
  if (!e.origin.empty()) j["origin"] = parse_or_string(e.origin);
  j["repeats"] = r.repeats;
  if (!r.reproduce_verdict.empty()) {
    j["reproduce"] = {{"verdict", r.reproduce_verdict}, {"runs", r.reproduce_runs}, {"matches", r.reproduce_matches}};
  }
  if (!r.minimized_sha256.empty()) j["minimized_sha256"] = r.minimized_sha256;
  j["created_at"] = iso_time(r.created_at);
  j["updated_at"] = iso_time(r.updated_at);
  if (attempts > 0) j["attempts"] = attempts;
  if (tally != nullptr) {
    json by_kind = json::array();
    for (const auto& t : *tally) {
      by_kind.push_back({{"kind", t.kind}, {"count", t.count}, {"first", iso_time(t.first_ms)}, {"last", iso_time(t.last_ms)}});
    }
    j["attempts_by_kind"] = by_kind;
  }
  j["new_fingerprint"] = new_fingerprint;
  if (!store_dir.empty()) j["store"] = store_dir;
  return j.dump(-1, ' ', false, json::error_handler_t::replace);
}

}  // namespace pillbox
