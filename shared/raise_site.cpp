#include "shared/raise_site.h"

#include <nlohmann/json.hpp>

namespace pillbox {

std::string raise_site(std::string_view kind, const std::vector<std::string>& crash_state) {
  if (kind == "handler-error" && crash_state.size() >= 2) return crash_state[0] + " at " + crash_state[1];
  if (kind == "crash" && !crash_state.empty()) return "crash at " + crash_state[0];
  return "";
}

std::string raise_site(std::string_view kind, std::string_view crash_state_json) {
  if (kind != "handler-error" && kind != "crash") return "";  // spares the parse
  const auto j = nlohmann::json::parse(crash_state_json, nullptr, false);
  if (!j.is_array()) return "";
  std::vector<std::string> state;
  for (const auto& frame : j) {
    if (!frame.is_string()) return "";
    state.push_back(frame.get<std::string>());
    if (state.size() == 2) break;
  }
  return raise_site(kind, state);
}

}  // namespace pillbox
