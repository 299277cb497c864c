#include "supervisor/serve/html_text.h"

#include <algorithm>

#include <cstdio>

#include "supervisor/io/terminal_text.h"

namespace pillbox::serve {
namespace {

constexpr std::string_view kReplacement = "\xEF\xBF\xBD";  // U+FFFD

// The length of the valid UTF-8 sequence at the start of `s` (1 to 4), or 0
// when it is not one (overlong forms, surrogates and values past U+10FFFF
// are not valid).
std::size_t utf8_sequence(std::string_view s) {
  const auto b = [&](std::size_t i) { return static_cast<unsigned char>(s[i]); };
  const unsigned char c = b(0);
  if (c < 0x80) return 1;
  std::size_t n = 0;
  unsigned char min2 = 0x80, max2 = 0xBF;
  if (c >= 0xC2 && c <= 0xDF) n = 2;
  else if (c == 0xE0) n = 3, min2 = 0xA0;
  else if (c == 0xED) n = 3, max2 = 0x9F;
  else if (c >= 0xE1 && c <= 0xEF) n = 3;
  else if (c == 0xF0) n = 4, min2 = 0x90;
  else if (c >= 0xF1 && c <= 0xF3) n = 4;
  else if (c == 0xF4) n = 4, max2 = 0x8F;
  else return 0;
  if (s.size() < n) return 0;
  if (b(1) < min2 || b(1) > max2) return 0;
  for (std::size_t i = 2; i < n; ++i) {
    if (b(i) < 0x80 || b(i) > 0xBF) return 0;
  }
  return n;
}

// A C0 control (but tab and newline), DEL, a C1 control (U+0080..U+009F,
// encoded C2 80..C2 9F), or a bidirectional control (bidi_control_at).
bool is_control(std::string_view seq, bool allow_cr) {
  const auto c = static_cast<unsigned char>(seq[0]);
  if (seq.size() == 1) return (c < 0x20 && c != '\t' && c != '\n' && !(allow_cr && c == '\r')) || c == 0x7F;
  return (seq.size() == 2 && c == 0xC2 && static_cast<unsigned char>(seq[1]) < 0xA0) ||
         bidi_control_at(seq) == seq.size();
}

}  // namespace

std::string html_escape(std::string_view text) {
  std::string out;
  out.reserve(text.size() + text.size() / 8);
  for (std::size_t i = 0; i < text.size();) {
    const std::size_t n = utf8_sequence(text.substr(i));
    if (n == 0) {
      out += kReplacement;
      ++i;
      continue;
    }
    const std::string_view seq = text.substr(i, n);
    i += n;
    if (is_control(seq, false)) {
      out += kReplacement;
      continue;
    }
    switch (seq[0]) {
      case '&': out += "&amp;"; break;
      case '<': out += "&lt;"; break;
      case '>': out += "&gt;"; break;
      case '"': out += "&quot;"; break;
      case '\'': out += "&#39;"; break;
      default: out += seq;
    }
  }
  return out;
}

std::string url_encode(std::string_view text) {
  static const char* kHex = "0123456789ABCDEF";
  std::string out;
  for (unsigned char c : text) {
    const bool unreserved = (c >= 'A' && c <= 'Z') || (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') || c == '-' ||
                            c == '.' || c == '_' || c == '~';
    if (unreserved) {
      out += static_cast<char>(c);
    } else {
      out += '%';
      out += kHex[c >> 4];
      out += kHex[c & 15];
    }
  }
  return out;
}

bool is_printable_utf8(std::string_view bytes) {
  for (std::size_t i = 0; i < bytes.size();) {
    const std::size_t n = utf8_sequence(bytes.substr(i));
    if (n == 0 || is_control(bytes.substr(i, n), true)) return false;
    i += n;
  }
  return true;
}

std::string payload_preview_html(std::string_view bytes, std::size_t max_bytes, std::size_t total_bytes) {
  total_bytes = std::max(total_bytes, bytes.size());
  std::string_view head = bytes.substr(0, max_bytes);
  // A cut in the middle of a UTF-8 sequence would make text look binary:
  // step back to the sequence's start (at most 3 bytes).
  if (head.size() < bytes.size()) {
    for (std::size_t back = 0; back < 3 && !head.empty(); ++back) {
      const auto c = static_cast<unsigned char>(bytes[head.size()]);
      if ((c & 0xC0) != 0x80) break;
      head.remove_suffix(1);
    }
  }
  std::string out;
  if (is_printable_utf8(head)) {
    out = "<pre class=\"payload text\">" + html_escape(head) + "</pre>\n";
  } else {
    head = bytes.substr(0, max_bytes);
    out = "<pre class=\"payload hex\">";
    char line[96];
    for (std::size_t at = 0; at < head.size(); at += 16) {
      std::snprintf(line, sizeof line, "%08zx ", at);
      out += line;
      std::string ascii;
      for (std::size_t i = at; i < at + 16; ++i) {
        if (i < head.size()) {
          const auto c = static_cast<unsigned char>(head[i]);
          std::snprintf(line, sizeof line, " %02x", c);
          out += line;
          ascii += c >= 0x20 && c < 0x7F ? static_cast<char>(c) : '.';
        } else {
          out += "   ";
        }
      }
      out += "  " + html_escape(ascii) + "\n";
    }
    out += "</pre>\n";
  }
  const std::string format = out.find("payload text") != std::string::npos ? "text" : "hex";
  if (head.size() < total_bytes) {
    out += "<p class=\"note\">first " + std::to_string(head.size()) + " of " + std::to_string(total_bytes) +
           " bytes shown (" + format + ")</p>\n";
  } else {
    out += "<p class=\"note\">" + std::to_string(total_bytes) + " bytes (" + format + ")</p>\n";
  }
  return out;
}

}  // namespace pillbox::serve
