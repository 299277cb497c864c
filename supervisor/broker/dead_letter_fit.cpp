#include "supervisor/broker/dead_letter_fit.h"

#include <nlohmann/json.hpp>
#include <vector>

#include "supervisor/broker/delivery_history.h"

namespace pillbox::broker {
namespace {

std::string dumped(const nlohmann::json& j) { return j.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace); }

}  // namespace

std::string fitted_record(const std::string& record, std::size_t limit, std::string_view to_fit) {
  const std::size_t fit_within = limit - 512;  // room for `cut`
  if (record.size() <= fit_within) return record;
  nlohmann::json j = nlohmann::json::parse(record, nullptr, false);
  if (!j.is_object()) return record;
  std::vector<std::string> cut;
  std::size_t size = record.size();
  nlohmann::json* attempts = nullptr;
  if (auto it = j.find("attempts_history"); it != j.end() && it->is_array()) attempts = &*it;
  // Rewrites the earlier deliveries' entries, oldest first, while the record
  // is too long, keeping its size by difference (linear); whether any changed.
  auto each_earlier = [&](auto&& step) {
    bool changed = false;
    for (std::size_t i = 0; attempts != nullptr && size > fit_within && i + 1 < attempts->size(); ++i) {
      nlohmann::json& entry = (*attempts)[i];
      if (!entry.is_object()) continue;
      const std::size_t before = dumped(entry).size();
      step(entry);
      const std::size_t after = dumped(entry).size();
      size = size - before + after;
      changed = changed || after != before;
    }
    return changed;
  };
  if (each_earlier([](nlohmann::json& entry) {
        entry.erase("message");
        entry.erase("crash_state");
      })) {
    cut.push_back("the earlier deliveries' messages and crash states");
  }
  if (size > fit_within && j.contains("stderr_tail_b64")) {
    j.erase("stderr_tail_b64");
    cut.push_back("the stderr tail");
    size = dumped(j).size();
  }
  if (size > fit_within && each_earlier([](nlohmann::json& entry) {
        nlohmann::json kept = nlohmann::json::object();
        for (const char* name : {"delivery", "kind", "fingerprint", "charged", "transient", "started"}) {
          if (auto f = entry.find(name); f != entry.end()) kept[name] = *f;
        }
        entry = std::move(kept);
      })) {
    cut.push_back("the earlier deliveries' other details");
  }
  if (size > fit_within && attempts != nullptr && attempts->size() > 1) {
    std::size_t dropped = 0;
    for (; size > fit_within && dropped + 1 < attempts->size(); ++dropped) size -= dumped((*attempts)[dropped]).size() + 1;
    attempts->erase(attempts->begin(), attempts->begin() + static_cast<std::ptrdiff_t>(dropped));
    j["attempts_omitted"] = dropped;
    cut.push_back("the " + std::to_string(dropped) + " oldest deliveries");
    size = dumped(j).size();
  }
  for (const char* name : {"key", "message"}) {
    const auto it = j.find(name);
    if (size <= fit_within || it == j.end() || !it->is_string()) continue;
    const std::string text = it->get<std::string>();
    if (text.size() <= kMaxRecordedMessage) continue;
    *it = text.substr(0, kMaxRecordedMessage);
    cut.push_back("the " + std::string(name) + " (" + std::to_string(text.size()) + " bytes) after its first " +
                  std::to_string(kMaxRecordedMessage));
    size = dumped(j).size();
  }
  if (!cut.empty()) {
    std::string words;
    for (const std::string& c : cut) words += (words.empty() ? "" : ", ") + c;
    j["cut"] = "to fit " + std::string(to_fit) + ": " + words;
  }
  return dumped(j);
}

}  // namespace pillbox::broker
