// The "regex" handler: libstdc++'s std::regex (ECMAScript grammar) applied to
// the payload. Deliberately the real, unbounded engine: its backtracking
// executor is exponential on patterns like `(a+)+$` and recurses once per
// matched character on patterns like `(a|b)*`, which is exactly what pillbox
// exists to contain (cpu-limit and stack-overflow respectively).
#include <cstdio>
#include <optional>

// GCC 12 at -O2 reports a false -Wmaybe-uninitialized inside libstdc++'s
// regex compiler (GCC bug 105616); it is not about this file's code. (clang,
// which builds the sanitizer run, has no such warning.)
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#endif
#include <regex>
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic pop
#endif

#include "sandbox/handler.h"

namespace pillbox::handlers {

enum class RegexMode { kSearch, kMatch };

struct RegexMatch {
  std::size_t position = 0;
  std::size_t length = 0;
};

// Kept out of line: this frame is the bug site that crash fingerprints name
// (the executor's own frames are libstdc++'s and get dropped).
[[gnu::noinline]] std::optional<RegexMatch> regex_search_subject(const std::regex& re,
                                                                 std::string_view subject,
                                                                 RegexMode mode) {
  std::cmatch m;
  const char* first = subject.data();
  const char* last = first + subject.size();
  const bool found = mode == RegexMode::kMatch ? std::regex_match(first, last, m, re)
                                               : std::regex_search(first, last, m, re);
  if (!found) return std::nullopt;
  return RegexMatch{static_cast<std::size_t>(m.position(0)), static_cast<std::size_t>(m.length(0))};
}

}  // namespace pillbox::handlers

namespace pillbox::sandbox {
namespace {

using handlers::RegexMode;

// JSON string escaping for arbitrary bytes: the payload need not be UTF-8, so
// bytes >= 0x80 pass through untouched rather than being reinterpreted.
void append_json_string(std::string& out, std::string_view s) {
  out += '"';
  for (const char c : s) {
    const auto byte = static_cast<unsigned char>(c);
    if (c == '"' || c == '\\') {
      out += '\\';
      out += c;
    } else if (byte < 0x20) {
      char escaped[7];
      std::snprintf(escaped, sizeof escaped, "\\u%04x", byte);
      out += escaped;
    } else {
      out += c;
    }
  }
  out += '"';
}

const char* describe(std::regex_constants::error_type code) {
  namespace rc = std::regex_constants;
  switch (code) {
    case rc::error_collate: return "invalid collating element name (error_collate)";
    case rc::error_ctype: return "invalid character class name (error_ctype)";
    case rc::error_escape: return "invalid escape or trailing backslash (error_escape)";
    case rc::error_backref: return "invalid back reference (error_backref)";
    case rc::error_brack: return "mismatched [ and ] (error_brack)";
    case rc::error_paren: return "mismatched ( and ) (error_paren)";
    case rc::error_brace: return "mismatched { and } (error_brace)";
    case rc::error_badbrace: return "invalid range in { } (error_badbrace)";
    case rc::error_range: return "invalid character range (error_range)";
    case rc::error_space: return "not enough memory to compile the pattern (error_space)";
    case rc::error_badrepeat: return "repeat operator with nothing to repeat (error_badrepeat)";
    case rc::error_complexity: return "pattern too complex (error_complexity)";
    case rc::error_stack: return "not enough memory to match (error_stack)";
    default: return "unknown regex error";
  }
}

class RegexHandler final : public Handler {
 public:
  RegexHandler(std::regex re, RegexMode mode) : re_(std::move(re)), mode_(mode) {}

  HandlerResult run(std::string_view payload, std::size_t max_output) override {
    const auto match = handlers::regex_search_subject(re_, payload, mode_);
    std::string json;
    if (match) {
      json = "{\"matched\":true,\"position\":" + std::to_string(match->position) +
             ",\"length\":" + std::to_string(match->length) + ",\"match\":";
      append_json_string(json, payload.substr(match->position, match->length));
      json += "}\n";
    } else {
      json = "{\"matched\":false}\n";
    }
    if (json.size() > max_output) {
      return {HandlerStatus::kOutputLimit, {},
              "regex result of " + std::to_string(json.size()) + " bytes exceeds the cap of " +
                  std::to_string(max_output)};
    }
    return {HandlerStatus::kOk, std::move(json), {}};
  }

 private:
  const std::regex re_;  // compiled once in the zygote, shared by every child
  const RegexMode mode_;
};

}  // namespace

Expected<std::unique_ptr<Handler>> make_regex_handler(const HandlerArgs& args) {
  for (const auto& [key, value] : args) {
    if (key != "pattern" && key != "mode" && key != "icase") {
      return Error{"handler 'regex' does not take --arg '" + key + "' (it takes: pattern, mode, icase)"};
    }
  }
  const auto pattern = args.find("pattern");
  if (pattern == args.end()) return Error{"handler 'regex' needs --arg pattern=REGEX"};

  RegexMode mode = RegexMode::kSearch;
  if (const auto it = args.find("mode"); it != args.end()) {
    if (it->second == "match") {
      mode = RegexMode::kMatch;
    } else if (it->second != "search") {
      return Error{"handler 'regex': --arg mode must be search or match, not '" + it->second + "'"};
    }
  }

  auto flags = std::regex::ECMAScript;
  if (const auto it = args.find("icase"); it != args.end()) {
    if (it->second == "yes") {
      flags |= std::regex::icase;
    } else if (it->second != "no") {
      return Error{"handler 'regex': --arg icase must be yes or no, not '" + it->second + "'"};
    }
  }

  try {
    return std::unique_ptr<Handler>(std::make_unique<RegexHandler>(std::regex(pattern->second, flags), mode));
  } catch (const std::regex_error& e) {
    return Error{"handler 'regex': invalid pattern '" + pattern->second + "': " + describe(e.code())};
  }
}

}  // namespace pillbox::sandbox
