#include "shared/fingerprint.h"

#include <algorithm>
#include <cstdio>
#include <set>

#include "shared/crash_report.h"
#include "shared/sha256.h"

namespace pillbox {
namespace {

constexpr std::size_t npos = std::string_view::npos;

bool is_ident_char(char c) {
  return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '_' ||
         c == '$';
}

bool is_alpha(char c) { return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || c == '_'; }

bool starts_with_at(std::string_view s, std::size_t i, std::string_view prefix) {
  return s.substr(i, prefix.size()) == prefix;
}

// `word` at s[i] and not followed by more identifier characters.
bool word_at(std::string_view s, std::size_t i, std::string_view word) {
  const std::size_t after = i + word.size();
  return starts_with_at(s, i, word) && (after >= s.size() || !is_ident_char(s[after]));
}

// Index just past the group of `open`/`close` that starts at s[i]; the end of
// the string when the group never closes (names from hostile files).
std::size_t skip_balanced(std::string_view s, std::size_t i, char open, char close) {
  int depth = 0;
  for (; i < s.size(); ++i) {
    if (s[i] == open) {
      ++depth;
    } else if (s[i] == close && --depth == 0) {
      return i + 1;
    }
  }
  return s.size();
}

// Template argument lists hold expressions such as `(1>2)`; the demangler puts
// them in parentheses, so angle brackets only count outside parentheses.
std::size_t skip_template_args(std::string_view s, std::size_t i) {
  int angles = 0;
  int parens = 0;
  for (; i < s.size(); ++i) {
    const char c = s[i];
    if (c == '(') {
      ++parens;
    } else if (c == ')') {
      if (parens > 0) --parens;
    } else if (parens == 0 && c == '<') {
      ++angles;
    } else if (parens == 0 && c == '>' && --angles == 0) {
      return i + 1;
    }
  }
  return s.size();
}

// Skips a parameter list and the cv/ref/noexcept qualifiers that follow it.
std::size_t skip_parameters(std::string_view s, std::size_t i) {
  i = skip_balanced(s, i, '(', ')');
  for (;;) {
    std::size_t j = i;
    while (j < s.size() && s[j] == ' ') ++j;
    if (word_at(s, j, "const") || word_at(s, j, "volatile")) {
      i = j + (s[j] == 'c' ? 5 : 8);
    } else if (word_at(s, j, "noexcept")) {
      i = j + 8;
      if (i < s.size() && s[i] == '(') i = skip_balanced(s, i, '(', ')');
    } else if (starts_with_at(s, j, "&&")) {
      i = j + 2;
    } else if (starts_with_at(s, j, "&")) {
      i = j + 1;
    } else {
      return i;
    }
  }
}

// "{lambda(int)#2}" -> "{lambda}", "{unnamed type#1}" -> "{unnamed type}": the
// numbering depends on the order of definitions in the file, not on the bug.
std::size_t copy_brace_entity(std::string_view s, std::size_t i, std::string& out) {
  const std::size_t end = skip_balanced(s, i, '{', '}');
  const std::string_view inner = s.substr(i + 1, end - i - 1);
  out += '{';
  out += inner.substr(0, inner.find_first_of("(#}"));
  out += '}';
  return end;
}

// Operator names hold the characters the rest of the scan treats as
// brackets ("operator<", "operator()", "operator->"): copy them whole.
std::size_t copy_operator(std::string_view s, std::size_t i, std::string& out) {
  static constexpr std::string_view kSymbols[] = {
      "<=>", "<<=", ">>=", "->*", "\"\"", "<<", ">>", "<=", ">=", "->", "()", "[]", "==", "!=",
      "&&",  "||",  "++",  "--",  "+=",   "-=", "*=", "/=", "%=", "&=", "|=", "^=", "<",  ">",
      "+",   "-",   "*",   "/",   "%",    "^",  "&",  "|",  "~",  "!",  "=",  ",",
  };
  out += "operator";
  i += 8;
  for (std::string_view symbol : kSymbols) {
    if (starts_with_at(s, i, symbol)) {
      out += symbol;
      return i + symbol.size();
    }
  }
  if (i >= s.size() || s[i] != ' ') return i;
  ++i;
  for (std::string_view word : {"new", "delete"}) {
    if (word_at(s, i, word)) {
      out += ' ';
      out += word;
      i += word.size();
      if (starts_with_at(s, i, "[]")) {
        out += "[]";
        i += 2;
      }
      return i;
    }
  }
  // Conversion operator: the target type runs up to the parameter list.
  out += ' ';
  while (i < s.size() && s[i] != '(') {
    if (s[i] == '<') {
      i = skip_template_args(s, i);
    } else {
      out += s[i++];
    }
  }
  while (out.back() == ' ') out.pop_back();
  return i;
}

// Drops "[abi:cxx11]" tags and " [clone .cold]" suffixes, wherever they are.
std::string strip_bracket_tags(std::string_view s) {
  std::string out;
  out.reserve(s.size());
  for (std::size_t i = 0; i < s.size();) {
    const bool abi = starts_with_at(s, i, "[abi:");
    if (abi || starts_with_at(s, i, "[clone ")) {
      const std::size_t close = s.find(']', i);
      i = close == npos ? s.size() : close + 1;
      if (!abi && !out.empty() && out.back() == ' ') out.pop_back();
    } else {
      out += s[i++];
    }
  }
  return out;
}

std::string_view basename(std::string_view path) {
  const std::size_t slash = path.rfind('/');
  return slash == npos ? path : path.substr(slash + 1);
}

std::string hex(std::uint64_t value) {
  char buf[19];
  std::snprintf(buf, sizeof buf, "0x%llx", static_cast<unsigned long long>(value));
  return buf;
}

// The name a frame stands for in crash states and recursion checks.
std::string frame_identity(const SymbolizedFrame& frame) {
  // A symbol name can normalize to nothing ("<int>" in a hostile file); the
  // address then identifies the frame better than an empty string.
  if (std::string name = normalize_function(frame.function); !name.empty()) return name;
  if (frame.module.empty()) return hex(frame.offset);
  return std::string(basename(frame.module)) + "+" + hex(frame.offset);
}

bool is_ignored_module(std::string_view module) {
  static constexpr std::string_view kPrefixes[] = {
      "libc.so",   "libc-2.",   "libstdc++.so", "libgcc_s.so",         "ld-linux", "libm.so",
      "libm-2.",   "libpthread", "libpillbox-crash.so", "libasan", "libubsan",
  };
  const std::string_view name = basename(module);
  return std::any_of(std::begin(kPrefixes), std::end(kPrefixes),
                     [&](std::string_view p) { return name.starts_with(p); });
}

bool is_ignored_function(std::string_view name) {
  // `gsignal` is glibc's alias of raise; `__restore_rt` the signal trampoline.
  static constexpr std::string_view kExact[] = {
      "abort",  "raise",  "gsignal", "pthread_kill", "malloc",         "calloc",
      "realloc", "free",  "_start",  "__restore_rt", "std::terminate",
      "__gnu_cxx::__verbose_terminate_handler",
  };
  // `__libc_*` covers __libc_start_main and __libc_start_call_main;
  // `__assert_` covers __assert_fail and __assert_perror_fail. Handler code in
  // `pillbox::handlers::` is deliberately not here: that is where bugs live.
  static constexpr std::string_view kPrefixes[] = {
      "__GI_",        "__libc_",          "__pthread_",       "__assert_",
      "operator new", "operator delete",  "__cxa_",           "_Unwind_",
      "__sanitizer",  "__asan",           "__ubsan",          "pillbox::sandbox::",
      "pillbox::crash::",
  };
  return std::find(std::begin(kExact), std::end(kExact), name) != std::end(kExact) ||
         std::any_of(std::begin(kPrefixes), std::end(kPrefixes),
                     [&](std::string_view p) { return name.starts_with(p); });
}

}  // namespace

std::string normalize_function(std::string_view demangled) {
  const std::string s = strip_bracket_tags(demangled);
  std::string out;
  // Demangled function templates carry their return type ("void foo<int>(int)"):
  // the name is what follows the last space written at the top level.
  std::size_t name_start = 0;
  for (std::size_t i = 0; i < s.size();) {
    const char c = s[i];
    if (is_ident_char(c)) {
      if (word_at(s, i, "operator")) {
        i = copy_operator(s, i, out);
        continue;
      }
      while (i < s.size() && is_ident_char(s[i])) out += s[i++];
      continue;
    }
    switch (c) {
      case '<':
        i = skip_template_args(s, i);
        break;
      case '(':
        if (starts_with_at(s, i, "(anonymous namespace)")) {
          out += "(anonymous namespace)";
          i += 21;
        } else {
          i = skip_parameters(s, i);
        }
        break;
      case '{':
        i = copy_brace_entity(s, i, out);
        break;
      case '.':
        // Compiler clone suffixes of raw names: "parse.cold", "f.isra.0", "g.constprop.0".
        if (i + 1 < s.size() && is_alpha(s[i + 1])) {
          i = s.size();
        } else {
          out += s[i++];
        }
        break;
      case ' ': {
        const std::size_t next = s.find_first_not_of(' ', i);
        if (next != npos && s[next] != '<' && !out.empty()) {
          out += ' ';
          name_start = out.size();
        }
        i = next == npos ? s.size() : next;
        break;
      }
      default:
        out += s[i++];
    }
  }
  return out.substr(std::min(name_start, out.size()));
}

bool is_ignored_frame(const SymbolizedFrame& frame) {
  if (is_ignored_module(frame.module)) return true;
  return !frame.function.empty() && is_ignored_function(normalize_function(frame.function));
}

std::vector<std::string> crash_state(const std::vector<SymbolizedFrame>& frames,
                                     std::size_t depth) {
  std::vector<std::string> state;
  for (const SymbolizedFrame& frame : frames) {
    if (state.size() >= depth) break;
    if (!is_ignored_frame(frame)) state.push_back(frame_identity(frame));
  }
  // A crash entirely inside ignored code (say, abort() called from a stripped
  // static binary) still needs an identity: use the top frames as they are.
  if (state.empty()) {
    for (std::size_t i = 0; i < frames.size() && i < depth; ++i) {
      state.push_back(frame_identity(frames[i]));
    }
  }
  return state;
}

namespace {

// A stretch of frames that repeats with a fixed period: recursion.
struct RecursionCycle {
  std::size_t start = 0;
  std::size_t period = 0;
  std::size_t span = 0;  // frames covered, counting the first turn; 0: none
};

// The longest stretch of `names` with exactly this period, if it holds at
// least two whole turns.
RecursionCycle longest_run(const std::vector<std::string>& names, std::size_t period) {
  RecursionCycle best;
  std::size_t run_start = 0;
  for (std::size_t k = period; k <= names.size(); ++k) {
    if (k < names.size() && names[k] == names[k - period]) continue;
    const std::size_t span = k - run_start;  // names[run_start, k) has this period
    if (span >= 2 * period && span > best.span) best = {run_start, period, span};
    // names[k] breaks the pattern, so a new stretch starts after names[k - period].
    run_start = k + 1 - period;
  }
  return best;
}

// The longest recursion stretch over all periods up to `max_period`; on equal
// spans the shorter period (a cycle of 6 also "repeats" every 12).
RecursionCycle longest_cycle(const std::vector<std::string>& names, std::size_t max_period) {
  RecursionCycle best;
  for (std::size_t period = 1; period <= max_period; ++period) {
    const RecursionCycle run = longest_run(names, period);
    if (run.span > best.span) best = run;
  }
  return best;
}

std::vector<std::string> frame_names(const std::vector<SymbolizedFrame>& frames, std::size_t limit) {
  std::vector<std::string> names;
  for (std::size_t i = 0; i < frames.size() && i < limit; ++i) names.push_back(frame_identity(frames[i]));
  return names;
}

// A cycle of up to 16 frames: libstdc++'s regex executor recurses through 6
// frames when optimized and 11 in a debug build; 4 turns of 16 fill the 64
// frames a crash report carries.
constexpr std::size_t kMaxCycle = 16;

}  // namespace

std::vector<std::string> recursion_state(const std::vector<SymbolizedFrame>& frames,
                                         std::size_t depth) {
  const std::vector<std::string> names = frame_names(frames, frames.size());
  const RecursionCycle cycle = longest_cycle(names, kMaxCycle);
  if (cycle.span == 0) return crash_state(frames, depth);
  // The members of one turn of the cycle, sorted: the same set whichever
  // frame of the cycle the stack ran out in. Frames above the cycle (the
  // leaf that touched the guard page, helpers it called) are left out.
  std::set<std::string> members;
  std::set<std::string> ignored_members;
  for (std::size_t i = cycle.start; i < cycle.start + cycle.period; ++i) {
    (is_ignored_frame(frames[i]) ? ignored_members : members).insert(names[i]);
  }
  if (members.empty()) members = std::move(ignored_members);  // recursion inside libc itself
  std::vector<std::string> state;
  for (const std::string& name : members) {
    if (state.size() >= depth) break;
    state.push_back(name);
  }
  return state;
}

bool frames_recurse(const std::vector<SymbolizedFrame>& frames) {
  // An overflow leaves thousands of frames, so a report's whole window is
  // taken, and one cycle fills nearly all of it (a few frames on top are where
  // the stack ran out). A crash a few levels deep in an ordinary recursive
  // walk has main and its callers in the window too: that is a crash.
  constexpr std::size_t kWindow = kMaxCrashFrames;
  constexpr std::size_t kMinSpan = kWindow * 3 / 4;
  if (frames.size() < kWindow) return false;
  const std::vector<std::string> names = frame_names(frames, kWindow);
  return longest_cycle(names, kMaxCycle).span >= kMinSpan;
}

std::string normalize_message(std::string_view message) {
  constexpr std::size_t kMaxLength = 200;
  const std::string_view line = message.substr(0, message.find_first_of("\r\n"));
  const std::size_t first = line.find_first_not_of(" \t");
  if (first == npos) return "";
  const std::string_view trimmed = line.substr(first, line.find_last_not_of(" \t") - first + 1);

  auto is_digit = [](char c) { return c >= '0' && c <= '9'; };
  auto is_hex = [&](char c) { return is_digit(c) || (c >= 'a' && c <= 'f') || (c >= 'A' && c <= 'F'); };
  std::string out;
  for (std::size_t i = 0; i < trimmed.size() && out.size() < kMaxLength;) {
    if (trimmed[i] == '0' && i + 2 < trimmed.size() && (trimmed[i + 1] == 'x' || trimmed[i + 1] == 'X') &&
        is_hex(trimmed[i + 2])) {
      out += "0xN";
      for (i += 2; i < trimmed.size() && is_hex(trimmed[i]);) ++i;
    } else if (is_digit(trimmed[i])) {
      out += 'N';
      while (i < trimmed.size() && is_digit(trimmed[i])) ++i;
    } else {
      out += trimmed[i++];
    }
  }
  out.resize(std::min(out.size(), kMaxLength));
  while (!out.empty() && (out.back() == ' ' || out.back() == '\t')) out.pop_back();
  return out;
}

std::string make_fingerprint(Kind kind, std::string_view detail,
                             const std::vector<std::string>& state,
                             std::string_view handler_identity) {
  // Every field is length-prefixed ("5:crash"), so no choice of bytes inside a
  // field (symbol names come from files a hostile child may name) can make
  // two different field lists hash the same canonical string.
  std::string canonical = "pb1";
  auto append = [&](std::string_view field) {
    canonical += '\x1f';
    canonical += std::to_string(field.size());
    canonical += ':';
    canonical += field;
  };
  append(to_string(kind));
  append(detail);
  append(std::to_string(state.size()));
  for (const std::string& element : state) append(element);
  append(handler_identity);
  return "pb1-" + sha256_hex(canonical).substr(0, 16);
}

}  // namespace pillbox
