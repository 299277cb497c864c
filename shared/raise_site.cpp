#include "shared/raise_site.h"

#include <nlohmann/json.hpp>

#include "shared/sha256.h"

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

std::string raise_site_id(std::string_view handler_identity, std::string_view site) {
  if (site.empty()) return "";
  // Length-prefixed, so that no choice of bytes in one field moves into the other.
  const std::string fields = std::to_string(handler_identity.size()) + ":" + std::string(handler_identity) +
                             std::to_string(site.size()) + ":" + std::string(site);
  return "rs-" + sha256_hex(fields).substr(0, 16);
}

bool is_raise_site_id(std::string_view text) {
  return text.size() == 19 && text.starts_with("rs-") &&
         text.find_first_not_of("0123456789abcdef", 3) == std::string_view::npos;
}

}  // namespace pillbox
