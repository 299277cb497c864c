#include "shared/task_input.h"

#include <array>
#include <utility>

namespace pillbox {
namespace {

enum class Replacement { kPath, kPathStem, kName, kNameStem, kKey };

// Longest first where one is the start of another ("{/.}" before "{/}").
constexpr std::array<std::pair<std::string_view, Replacement>, 5> kStrings = {{
    {"{key}", Replacement::kKey},
    {"{/.}", Replacement::kNameStem},
    {"{/}", Replacement::kName},
    {"{.}", Replacement::kPathStem},
    {"{}", Replacement::kPath},
}};

// The replacement string at arg[i], if any: its length and what it is.
std::pair<std::size_t, Replacement> string_at(std::string_view arg, std::size_t i) {
  for (const auto& [text, what] : kStrings) {
    if (arg.substr(i, text.size()) == text) return {text.size(), what};
  }
  return {0, Replacement::kPath};
}

std::string_view last_component(std::string_view path) {
  const std::size_t slash = path.rfind('/');
  return slash == std::string_view::npos ? path : path.substr(slash + 1);
}

// Bytes a file name keeps: none a shell gives a meaning to, unquoted, so
// that {} inside `sh -c '... {}'` (as it always was) stays one word that
// runs nothing; bytes of UTF-8 and other 8-bit text are kept.
bool shell_inert(unsigned char c) {
  return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c >= 0x80 || c == '.' ||
         c == '_' || c == '-' || c == '+' || c == ',' || c == '@' || c == '%' || c == ':' || c == '=';
}

bool only_dots(std::string_view s) { return s.find_first_not_of('.') == std::string_view::npos; }

}  // namespace

std::string payload_file_name(std::string_view key) {
  const std::string_view last = last_component(key);
  if (last.size() > 255 || only_dots(last)) return "payload";
  std::string name(last);
  for (char& c : name) {
    if (!shell_inert(static_cast<unsigned char>(c))) c = '_';
  }
  // Never an option to the program it is given to ({/} of a key "-rf").
  if (name.front() == '-') name.front() = '_';
  return name;
}

std::string_view without_extension(std::string_view name) {
  const std::size_t dot = name.rfind('.');
  if (dot == std::string_view::npos || only_dots(name.substr(0, dot + 1))) return name;
  return name.substr(0, dot);
}

bool names_payload_file(std::string_view arg) {
  for (std::size_t i = 0; i < arg.size(); ++i) {
    if (const auto [length, what] = string_at(arg, i); length > 0 && what != Replacement::kKey) return true;
  }
  return false;
}

bool has_replacement_string(std::string_view arg) {
  for (std::size_t i = 0; i < arg.size(); ++i) {
    if (string_at(arg, i).first > 0) return true;
  }
  return false;
}

std::string expand_replacement_strings(std::string_view arg, std::string_view payload_path, std::string_view key) {
  const std::string name = payload_file_name(key);
  const std::string_view file = last_component(payload_path);
  const std::string_view dir = payload_path.substr(0, payload_path.size() - file.size());
  std::string out;
  for (std::size_t i = 0; i < arg.size();) {
    const auto [length, what] = string_at(arg, i);
    if (length == 0) {
      out += arg[i++];
      continue;
    }
    switch (what) {
      case Replacement::kPath: out += payload_path; break;
      case Replacement::kPathStem: out.append(dir).append(without_extension(file)); break;
      case Replacement::kName: out += name; break;
      case Replacement::kNameStem: out += without_extension(name); break;
      case Replacement::kKey: out += key; break;
    }
    i += length;
  }
  return out;
}

}  // namespace pillbox
