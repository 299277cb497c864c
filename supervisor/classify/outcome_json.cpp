#include "supervisor/classify/outcome_json.h"

#include <limits>

#include "supervisor/classify/outcome.h"
#include "supervisor/io/untrusted_json.h"

namespace pillbox {
namespace {

using nlohmann::json;

// The signal a name stands for ("SIGSEGV": 11); 0 for none.
std::int64_t signal_number(const std::string& name) {
  for (int sig = 1; sig < 65; ++sig) {
    if (signal_name(sig) == name) return sig;
  }
  return 0;
}

// Field readers: absent or null leaves `out` alone (true); a wrong type, or
// a number not whole or out of range, is false.
bool read_text(const json& j, const char* name, std::string& out) {
  const auto it = j.find(name);
  if (it == j.end() || it->is_null()) return true;
  if (!it->is_string()) return false;
  out = it->get<std::string>();
  return true;
}

constexpr std::int64_t kIntMin = std::numeric_limits<int>::min();
constexpr std::int64_t kIntMax = std::numeric_limits<int>::max();
constexpr std::int64_t kInt64Max = std::numeric_limits<std::int64_t>::max();

// A whole number in [lo, hi].
bool read_whole(const json& j, const char* name, std::int64_t& out, std::int64_t lo, std::int64_t hi) {
  const auto it = j.find(name);
  if (it == j.end() || it->is_null()) return true;
  const auto v = json_whole_number(*it);
  if (!v || *v < lo || *v > hi) return false;
  out = *v;
  return true;
}

// By name (as put_outcome_record writes it) or by number (older
// deliveries); a name that is no signal is refused.
bool read_signal(const json& j, std::int64_t& out) {
  const auto it = j.find("signal");
  if (it != j.end() && it->is_string()) {
    const std::int64_t n = signal_number(it->get<std::string>());
    if (n == 0) return false;
    out = n;
    return true;
  }
  return read_whole(j, "signal", out, 0, kMaxSignal);
}

bool read_frames(const json& j, std::vector<std::string>& out, bool strict) {
  const auto it = j.find("crash_state");
  if (it == j.end() || it->is_null()) return true;
  if (!it->is_array()) return false;
  std::vector<std::string> frames;
  for (const auto& frame : *it) {
    if (frame.is_string()) {
      frames.push_back(frame.get<std::string>());
    } else if (strict) {
      return false;
    }
  }
  out = std::move(frames);
  return true;
}

// A signal's JSON text: its name; one an Outcome cannot hold by its number,
// never truncated into another signal's name.
std::string signal_text(std::int64_t signal) {
  if (signal > 0 && signal <= kMaxSignal) return signal_name(static_cast<int>(signal));
  return "signal " + std::to_string(signal);
}

}  // namespace

void put_outcome_record(const OutcomeRecord& r, json& j) {
  j["kind"] = r.kind;
  j["fingerprint"] = r.fingerprint.empty() ? json(nullptr) : json(r.fingerprint);
  j["crash_state"] = r.crash_state;
  j["message"] = r.message;
  j["signal"] = r.signal != 0 ? json(signal_text(r.signal)) : json(nullptr);
  j["syscall"] = r.syscall.empty() ? json(nullptr) : json(r.syscall);
  j["exit_code"] = r.exit_code >= 0 ? json(r.exit_code) : json(nullptr);
  j["cpu_ms"] = r.cpu_ms;
  j["wall_ms"] = r.wall_ms;
  j["max_rss_kb"] = r.max_rss_kb;
}

std::optional<OutcomeRecord> read_outcome_record(const json& j, bool strict) {
  OutcomeRecord r;
  if (!j.is_object()) return strict ? std::nullopt : std::optional<OutcomeRecord>(r);
  // Without `strict`, a field of the wrong type keeps its default.
  auto keep = [&](bool ok) { return ok || !strict; };
  const bool ok = keep(read_text(j, "kind", r.kind)) && keep(read_text(j, "fingerprint", r.fingerprint)) &&
                  keep(read_text(j, "message", r.message)) && keep(read_text(j, "syscall", r.syscall)) &&
                  keep(read_signal(j, r.signal)) && keep(read_whole(j, "exit_code", r.exit_code, kIntMin, kIntMax)) &&
                  keep(read_whole(j, "cpu_ms", r.cpu_ms, 0, kInt64Max)) &&
                  keep(read_whole(j, "wall_ms", r.wall_ms, 0, kInt64Max)) &&
                  keep(read_whole(j, "max_rss_kb", r.max_rss_kb, 0, kInt64Max));
  if (!ok || !keep(read_frames(j, r.crash_state, strict))) return std::nullopt;
  return r;
}

std::string crash_state_text(const std::vector<std::string>& crash_state) {
  return json(crash_state).dump(-1, ' ', false, json::error_handler_t::replace);
}

std::vector<std::string> crash_state_of_text(const std::string& text) {
  // A row nested deeper than pillbox writes would overflow the stack of
  // whoever prints it (untrusted_json.h): its text, as one frame.
  if (json_nesting(text, kMaxJsonDepth + 1) > kMaxJsonDepth) return {text};
  const json parsed = json::parse(text, nullptr, false);
  if (!parsed.is_array()) return {text};
  std::vector<std::string> frames;
  for (const auto& frame : parsed) {
    frames.push_back(frame.is_string() ? frame.get<std::string>()
                                       : frame.dump(-1, ' ', false, json::error_handler_t::replace));
  }
  return frames;
}

}  // namespace pillbox
