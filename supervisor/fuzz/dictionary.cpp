#include "supervisor/fuzz/dictionary.h"

#include <fcntl.h>

#include <cstdio>
#include <optional>
#include <unordered_set>

#include "supervisor/io/regular_file.h"

// Where AFL and libFuzzer differ we take the stricter reading and say what
// is wrong, with the line: a dictionary that silently loses a token weakens
// a session without anyone noticing.

namespace pillbox::fuzz {
namespace {

constexpr std::string_view kExpected = "expected name=\"value\" or \"value\"";

bool is_blank(char c) { return c == ' ' || c == '\t' || c == '\r' || c == '\v' || c == '\f'; }

// AFL reads names as [A-Za-z0-9_]; '-' and '.' are accepted too, as they
// appear in hand-written dictionaries and libFuzzer ignores the name anyway.
bool is_name_char(char c) {
  return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '_' || c == '-' ||
         c == '.';
}

int hex_digit(char c) {
  if (c >= '0' && c <= '9') return c - '0';
  if (c >= 'a' && c <= 'f') return c - 'a' + 10;
  if (c >= 'A' && c <= 'F') return c - 'A' + 10;
  return -1;
}

// A byte as it may appear in a one-line message: itself if printable, else \xNN.
std::string shown(char c) {
  const auto u = static_cast<unsigned char>(c);
  if (u >= 0x20 && u < 0x7f) return std::string(1, c);
  char buf[8];
  std::snprintf(buf, sizeof buf, "\\x%02x", u);
  return buf;
}

// Parses one entry line (without its '\n'): stores the value and returns
// nullopt, or returns what is wrong.
std::optional<std::string> parse_entry(std::string_view line, std::string& value) {
  std::size_t i = 0;
  while (i < line.size() && is_blank(line[i])) ++i;

  // Optional name, optional @level, then '=' (blanks around it allowed, as AFL does).
  if (i < line.size() && line[i] != '"') {
    const std::size_t name_start = i;
    while (i < line.size() && is_name_char(line[i])) ++i;
    if (i == name_start) return std::string(kExpected);
    if (i < line.size() && line[i] == '@') {
      const std::size_t level_start = ++i;
      while (i < line.size() && line[i] >= '0' && line[i] <= '9') ++i;
      if (i == level_start) return "a level after '@' must be a number, " + std::string(kExpected);
    }
    while (i < line.size() && is_blank(line[i])) ++i;
    if (i >= line.size() || line[i] != '=') return std::string(kExpected);
    ++i;
    while (i < line.size() && is_blank(line[i])) ++i;
  }
  if (i >= line.size() || line[i] != '"') return std::string(kExpected);
  ++i;

  // The quoted value, up to the first unescaped '"'.
  value.clear();
  bool closed = false;
  while (i < line.size()) {
    const char c = line[i];
    if (c == '"') {
      closed = true;
      ++i;
      break;
    }
    if (c == '\\') {
      if (i + 1 >= line.size()) break;  // reported as a missing closing quote
      const char e = line[i + 1];
      if (e == '\\' || e == '"') {
        value.push_back(e);
        i += 2;
        continue;
      }
      if (e == 'x') {
        const int hi = i + 2 < line.size() ? hex_digit(line[i + 2]) : -1;
        const int lo = i + 3 < line.size() ? hex_digit(line[i + 3]) : -1;
        if (hi < 0 || lo < 0) return std::string("\\x must be followed by two hex digits");
        value.push_back(static_cast<char>(hi * 16 + lo));
        i += 4;
        continue;
      }
      const std::string escape = static_cast<unsigned char>(e) >= 0x20 && static_cast<unsigned char>(e) < 0x7f
                                     ? "\\" + std::string(1, e)
                                     : "(a backslash before the byte " + shown(e) + ")";
      return "invalid escape " + escape + " (only \\\\, \\\" and \\xNN are allowed)";
    }
    // A raw control byte is invisible in the file: it must be written \xNN
    // (as AFL requires). Bytes from 0x80 up are accepted, unlike both tools,
    // so UTF-8 tokens can be written as they read.
    const auto u = static_cast<unsigned char>(c);
    if (u < 0x20 || u == 0x7f) {
      return "raw control byte in the value (write it as " + shown(c) + ")";
    }
    value.push_back(c);
    ++i;
  }
  if (!closed) return "missing closing '\"', " + std::string(kExpected);
  while (i < line.size() && is_blank(line[i])) ++i;
  if (i < line.size()) {
    return "unexpected text after the closing '\"' (a '\"' inside the value is written \\\")";
  }
  if (value.empty()) return std::string("empty value \"\" (a token must have at least one byte)");
  return std::nullopt;
}

}  // namespace

Expected<std::vector<std::string>> parse_dictionary(std::string_view text, std::string_view origin) {
  std::vector<std::string> tokens;
  // The same token twice would only double its chance of being drawn.
  std::unordered_set<std::string> seen;
  // A UTF-8 byte order mark, as some editors write, is not part of line 1.
  if (text.starts_with("\xEF\xBB\xBF")) text.remove_prefix(3);

  std::size_t line_number = 0;
  while (!text.empty()) {
    ++line_number;
    const std::size_t end = text.find('\n');
    const std::string_view line = text.substr(0, end);
    text.remove_prefix(end == std::string_view::npos ? text.size() : end + 1);

    std::size_t first = 0;
    while (first < line.size() && is_blank(line[first])) ++first;
    if (first == line.size() || line[first] == '#') continue;  // blank (CRLF too) or comment

    std::string value;
    if (auto wrong = parse_entry(line, value)) {
      return Error{std::string(origin) + ":" + std::to_string(line_number) + ": " + *wrong};
    }
    if (seen.insert(value).second) tokens.push_back(std::move(value));
  }
  if (tokens.empty()) return Error{std::string(origin) + ": no entries"};
  return tokens;
}

Expected<std::vector<std::string>> load_dictionary(const std::string& path) {
  auto text = read_regular_file_at(AT_FDCWD, path, 0, kMaxDictionaryBytes);
  if (!text) return Error{"cannot read dictionary " + path + ": " + text.error()};
  return parse_dictionary(*text, path);
}

}  // namespace pillbox::fuzz
