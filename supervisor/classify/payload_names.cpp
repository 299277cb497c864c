#include "supervisor/classify/payload_names.h"

#include <algorithm>
#include <vector>

#include "shared/task_input.h"
#include "supervisor/classify/traceback.h"

namespace pillbox {
namespace {

constexpr std::size_t kShortestName = 3;

bool is_word(char c) {
  return (c >= '0' && c <= '9') || (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || c == '_' ||
         static_cast<unsigned char>(c) >= 0x80;
}

// A name that can only be a file's or a key's: it holds a '/' or an
// extension. A bare word ("overflow", the stem "alice") is left alone: as a
// key it would mask that word in every message of the task, folding one bug
// into another's group.
bool file_like(std::string_view n) {
  return n.size() >= kShortestName && (n.find('/') != std::string_view::npos || without_extension(n) != n);
}

}  // namespace

std::string mask_payload_names(std::string_view message, std::string_view key) {
  const std::string name = payload_file_name(key);
  const std::string path = std::string(kPayloadDir) + "/" + name;
  const std::string_view last = key.substr(key.rfind('/') == std::string_view::npos ? 0 : key.rfind('/') + 1);
  std::vector<std::string_view> names = {path, kPayloadFdPath};
  for (std::string_view n : {key, last, std::string_view(name)}) {
    if (file_like(n)) names.push_back(n);
  }
  // The longest first: the path before the name inside it.
  std::stable_sort(names.begin(), names.end(), [](std::string_view a, std::string_view b) { return a.size() > b.size(); });
  std::string out;
  for (std::size_t i = 0; i < message.size();) {
    std::size_t matched = 0;
    if (i == 0 || !is_word(message[i - 1])) {
      for (std::string_view n : names) {
        if (message.substr(i, n.size()) != n) continue;
        const std::size_t end = i + n.size();
        if (end < message.size() && is_word(message[end]) && is_word(n.back())) continue;
        matched = n.size();
        break;
      }
    }
    if (matched > 0) {
      out += "<payload>";
      i += matched;
    } else {
      out += message[i++];
    }
  }
  return out;
}

void mask_payload_frames(Traceback& traceback, std::string_view key) {
  const std::string name = payload_file_name(key);
  const std::string_view fd_name = kPayloadFdPath.substr(kPayloadFdPath.rfind('/') + 1);
  for (TraceFrame& f : traceback.frames) {
    if (f.file == name || f.file == fd_name) f.file = "<payload>";
  }
}

}  // namespace pillbox
