#include "supervisor/io/terminal_text.h"

#include <cstdio>

namespace pillbox {

std::size_t bidi_control_at(std::string_view s) {
  const auto b = [&](std::size_t i) { return static_cast<unsigned char>(s[i]); };
  if (s.size() >= 2 && b(0) == 0xD8 && b(1) == 0x9C) return 2;
  if (s.size() < 3 || b(0) != 0xE2) return 0;
  if (b(1) == 0x80 && (b(2) == 0x8E || b(2) == 0x8F || (b(2) >= 0xAA && b(2) <= 0xAE))) return 3;
  if (b(1) == 0x81 && b(2) >= 0xA6 && b(2) <= 0xA9) return 3;
  return 0;
}

namespace {

// The length of the well-formed UTF-8 sequence that starts `s` (2 to 4
// bytes), or 0 when it is none: a lone 0x9B is CSI to a terminal that is
// not in UTF-8 mode.
std::size_t utf8_sequence_at(std::string_view s) {
  const auto b0 = static_cast<unsigned char>(s[0]);
  const std::size_t n = (b0 >= 0xC2 && b0 <= 0xDF) ? 2 : (b0 >= 0xE0 && b0 <= 0xEF) ? 3 : (b0 >= 0xF0 && b0 <= 0xF4) ? 4 : 0;
  if (n == 0 || s.size() < n) return 0;
  for (std::size_t i = 1; i < n; ++i) {
    if ((static_cast<unsigned char>(s[i]) & 0xC0) != 0x80) return 0;
  }
  return n;
}

}  // namespace

std::string table_cell(std::string_view text, std::size_t width) {
  std::string out;
  for (std::size_t i = 0; i < text.size(); ++i) {
    const auto c = static_cast<unsigned char>(text[i]);
    const auto next = i + 1 < text.size() ? static_cast<unsigned char>(text[i + 1]) : 0;
    if (c == 0xc2 && next >= 0x80 && next <= 0x9f) {  // C1 controls in UTF-8 (e.g. U+009B, CSI)
      out += '?';
      ++i;
    } else if (const std::size_t n = bidi_control_at(text.substr(i)); n > 0) {
      out += '?';
      i += n - 1;
    } else if (c >= 0x80) {
      // Text stays text; a byte that is no UTF-8 (a raw C1 control among
      // them) is a '?'.
      const std::size_t n = utf8_sequence_at(text.substr(i));
      if (n == 0) {
        out += '?';
      } else {
        out.append(text.substr(i, n));
        i += n - 1;
      }
    } else {
      out += (c < 0x20 || c == 0x7f) ? '?' : static_cast<char>(c);
    }
  }
  if (width > 0 && out.size() > width) out = out.substr(0, width - 1) + "~";
  return out;
}

std::string cut_at_word(std::string_view text, std::size_t max_bytes) {
  if (text.size() <= max_bytes) return std::string(text);
  const std::size_t room = max_bytes > 3 ? max_bytes - 3 : 0;  // for "..."
  std::size_t cut = room;
  // Not inside a UTF-8 sequence: a continuation byte is 10xxxxxx.
  while (cut > 0 && (static_cast<unsigned char>(text[cut]) & 0xC0) == 0x80) --cut;
  const std::size_t space = text.substr(0, room + 1).find_last_of(' ');
  if (space != std::string_view::npos && space >= room / 2) cut = space;
  std::string out(text.substr(0, cut));
  while (!out.empty() && (out.back() == ' ' || out.back() == ',' || out.back() == ':')) out.pop_back();
  return out + "...";
}

namespace {

bool plain_text(std::string_view bytes) {
  for (const char ch : bytes) {
    const auto c = static_cast<unsigned char>(ch);
    if (c == '\n' || c == '\t') continue;
    if (c < 0x20 || c >= 0x7f) return false;
  }
  return true;
}

}  // namespace

std::string payload_preview(std::string_view bytes, std::size_t max_bytes, const std::string& indent) {
  const std::string_view shown = bytes.substr(0, max_bytes);
  std::string out;
  if (plain_text(shown)) {
    std::size_t start = 0;
    while (start < shown.size()) {
      std::size_t end = shown.find('\n', start);
      if (end == std::string_view::npos) end = shown.size();
      out += indent + "| " + std::string(shown.substr(start, end - start)) + "\n";
      start = end + 1;
    }
  } else {
    char line[128];
    for (std::size_t off = 0; off < shown.size(); off += 16) {
      int n = std::snprintf(line, sizeof line, "%08zx ", off);
      std::string ascii;
      for (std::size_t i = 0; i < 16; ++i) {
        if (off + i < shown.size()) {
          const auto c = static_cast<unsigned char>(shown[off + i]);
          n += std::snprintf(line + n, sizeof line - static_cast<std::size_t>(n), "%s%02x", i == 8 ? "  " : " ", c);
          ascii += (c >= 0x20 && c < 0x7f) ? static_cast<char>(c) : '.';
        } else {
          n += std::snprintf(line + n, sizeof line - static_cast<std::size_t>(n), "%s  ", i == 8 ? "  " : " ");
        }
      }
      out += indent + line + "  |" + ascii + "|\n";
    }
  }
  if (bytes.size() > shown.size()) {
    out += indent + "(" + std::to_string(bytes.size() - shown.size()) + " more bytes; `pillbox quarantine export` writes them all)\n";
  }
  return out;
}

std::string text_lines(std::string_view text, const std::string& indent, std::size_t width) {
  std::string out;
  std::size_t start = 0;
  while (start < text.size()) {
    std::size_t end = text.find('\n', start);
    if (end == std::string_view::npos) end = text.size();
    std::string_view line = text.substr(start, end - start);
    if (!line.empty() && line.back() == '\r') line.remove_suffix(1);
    std::string expanded;
    for (const char c : line.substr(0, 4 * width)) {  // cut before expanding: tabs grow
      if (c == '\t') expanded.append(4 - expanded.size() % 4, ' ');
      else expanded += c;
    }
    out += indent + "| " + table_cell(expanded, width) + "\n";
    start = end + 1;
  }
  return out;
}

}  // namespace pillbox
