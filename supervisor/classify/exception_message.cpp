#include "supervisor/classify/exception_message.h"

#include <algorithm>

namespace pillbox {
namespace {

constexpr std::size_t kMaxInput = 1024;  // bounds the quote scans below (each looks ahead on the line)
constexpr std::size_t kMaxOutput = 200;

bool is_digit(char c) { return c >= '0' && c <= '9'; }
bool is_hex(char c) { return is_digit(c) || (c >= 'a' && c <= 'f') || (c >= 'A' && c <= 'F'); }
bool is_word(char c) {
  return is_digit(c) || (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || c == '_' ||
         static_cast<unsigned char>(c) >= 0x80;
}

// Where a path ends inside a message: at a blank, a quote or the
// punctuation that usually follows one.
bool ends_path(char c) {
  return c == ' ' || c == '\t' || c == '\'' || c == '"' || c == ')' || c == ']' || c == ',' || c == ';' || c == ':' || c == '>';
}

// A quote at s[i] opens a quoted value when it does not sit inside a word
// ("can't"), except after a string prefix (b'..', r"..", f'..', u'..').
bool opens_quote(std::string_view s, std::size_t i) {
  if (i == 0 || !is_word(s[i - 1])) return true;
  const char p = s[i - 1];
  return (p == 'b' || p == 'r' || p == 'f' || p == 'u' || p == 'B' || p == 'R') && (i == 1 || !is_word(s[i - 2]));
}

// Index of the quote that closes the one at s[open] (not escaped, not
// followed by a word character), or npos.
std::size_t closing_quote(std::string_view s, std::size_t open) {
  const char q = s[open];
  for (std::size_t j = open + 1; j < s.size(); ++j) {
    if (s[j] == '\\') {
      ++j;
    } else if (s[j] == q && (j + 1 == s.size() || !is_word(s[j + 1]))) {
      return j;
    }
  }
  return std::string_view::npos;
}

// Length of the temporary-directory prefix at s[i] ("/tmp" of "/tmp/x"), or 0.
std::size_t temp_prefix(std::string_view s, std::size_t i, const std::vector<std::string>& temp_dirs) {
  auto matches = [&](std::string_view dir) {
    while (dir.size() > 1 && dir.back() == '/') dir.remove_suffix(1);
    if (dir.size() < 2 || dir[0] != '/' || s.substr(i, dir.size()) != dir) return std::size_t{0};
    const std::size_t end = i + dir.size();
    return end == s.size() || s[end] == '/' || ends_path(s[end]) ? dir.size() : std::size_t{0};
  };
  for (std::string_view dir : {"/tmp", "/var/tmp", "/dev/shm"}) {
    if (const std::size_t n = matches(dir)) return n;
  }
  for (const std::string& dir : temp_dirs) {
    if (const std::size_t n = matches(dir)) return n;
  }
  return 0;
}

}  // namespace

std::string exception_message_key(std::string_view message, const std::vector<std::string>& temp_dirs) {
  std::string_view s = message.substr(0, std::min(message.find_first_of("\r\n"), kMaxInput));
  while (!s.empty() && (s.front() == ' ' || s.front() == '\t')) s.remove_prefix(1);
  while (!s.empty() && (s.back() == ' ' || s.back() == '\t')) s.remove_suffix(1);
  std::string out;
  for (std::size_t i = 0; i < s.size() && out.size() < kMaxOutput;) {
    const char c = s[i];
    if ((c == '\'' || c == '"') && opens_quote(s, i)) {
      if (const std::size_t close = closing_quote(s, i); close != std::string_view::npos) {
        out += "'?'";
        i = close + 1;
        continue;
      }
    }
    if (c == '/' && (i == 0 || !is_word(s[i - 1]))) {
      std::size_t skip = 0;
      if (s.substr(i).starts_with("/proc/self/fd/") && i + 14 < s.size() && is_digit(s[i + 14])) {
        out += "<payload>";
        skip = 14;
      } else if (temp_prefix(s, i, temp_dirs) > 0) {
        out += "<tmp>";
        skip = 1;
      }
      if (skip > 0) {
        for (i += skip; i < s.size() && !ends_path(s[i]);) ++i;
        continue;
      }
    }
    if (c == '0' && i + 2 < s.size() && (s[i + 1] == 'x' || s[i + 1] == 'X') && is_hex(s[i + 2])) {
      out += "0xX";
      for (i += 2; i < s.size() && is_hex(s[i]);) ++i;
    } else if (is_digit(c)) {
      out += 'N';
      while (i < s.size() && is_digit(s[i])) ++i;
    } else {
      out += c;
      ++i;
    }
  }
  out.resize(std::min(out.size(), kMaxOutput));
  return out;
}

}  // namespace pillbox
