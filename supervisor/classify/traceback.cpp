#include "supervisor/classify/traceback.h"

#include <algorithm>

namespace pillbox {
namespace {

constexpr auto npos = std::string_view::npos;

// Names and types longer than this are cut: a hostile child must not make
// one crash state element kilobytes long.
constexpr std::size_t kMaxNameBytes = 200;
constexpr std::size_t kMaxMessageBytes = 1024;

std::string capped(std::string_view s, std::size_t cap = kMaxNameBytes) { return std::string(s.substr(0, cap)); }

std::vector<std::string_view> split_lines(std::string_view text) {
  std::vector<std::string_view> lines;
  std::size_t start = 0;
  while (start < text.size()) {
    std::size_t end = text.find('\n', start);
    if (end == npos) end = text.size();
    std::string_view line = text.substr(start, end - start);
    if (!line.empty() && line.back() == '\r') line.remove_suffix(1);
    lines.push_back(line);
    start = end + 1;
  }
  return lines;
}

bool is_digit(char c) { return c >= '0' && c <= '9'; }
bool is_alpha(char c) { return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z'); }
bool is_ident(char c) { return is_alpha(c) || is_digit(c) || c == '_' || c == '$'; }

bool all_digits(std::string_view s) { return !s.empty() && std::all_of(s.begin(), s.end(), is_digit); }

// "ValueError", "json.decoder.JSONDecodeError", "java.lang.X$Inner", "Foo::Bar".
bool is_type_name(std::string_view s) {
  if (s.empty() || s.size() > kMaxNameBytes || !(is_alpha(s[0]) || s[0] == '_')) return false;
  return std::all_of(s.begin(), s.end(), [](char c) { return is_ident(c) || c == '.' || c == ':'; });
}

std::string_view basename(std::string_view path) {
  const std::size_t slash = path.rfind('/');
  return slash == npos ? path : path.substr(slash + 1);
}

std::string_view trim(std::string_view s) {
  while (!s.empty() && (s.front() == ' ' || s.front() == '\t')) s.remove_prefix(1);
  while (!s.empty() && (s.back() == ' ' || s.back() == '\t')) s.remove_suffix(1);
  return s;
}

// "Type: message" -> {Type, message}; nullopt when the part before ": " is
// not a type name (an ordinary line of output).
struct TypeAndMessage {
  std::string type;
  std::string message;
};
std::optional<TypeAndMessage> split_exception_line(std::string_view line) {
  const std::size_t colon = line.find(": ");
  std::string_view type = colon == npos ? trim(line) : line.substr(0, colon);
  std::string_view message = colon == npos ? std::string_view() : line.substr(colon + 2);
  if (colon == npos && !type.empty() && type.back() == ':') type.remove_suffix(1);
  if (!is_type_name(type)) return std::nullopt;
  return TypeAndMessage{std::string(type), capped(message, kMaxMessageBytes)};
}

// A candidate report and where it ends in the text: when several languages'
// parsers find one, the one printed last wins.
struct Found {
  Traceback traceback;
  std::size_t end_line = 0;
};

// A report of `exception` ending at `end_line`, its frames still to add.
Found found_of(std::string language, TypeAndMessage exception, std::size_t end_line) {
  return Found{Traceback{std::move(language), std::move(exception.type), std::move(exception.message), {}}, end_line};
}

// ---- Python -------------------------------------------------------------------

bool python_internal(std::string_view file) {
  // "<frozen importlib._bootstrap>", "<frozen runpy>"; the standard library
  // ("/usr/lib/python3.11/json/decoder.py"), like libc for native frames,
  // but not the packages installed beside it.
  if (file.starts_with("<frozen ")) return true;
  return file.find("/lib/python") != npos && file.find("-packages/") == npos;
}

// `  File "/path/x.py", line 12, in parse`
std::optional<TraceFrame> python_frame(std::string_view line) {
  constexpr std::string_view kPrefix = "  File \"";
  if (!line.starts_with(kPrefix)) return std::nullopt;
  line.remove_prefix(kPrefix.size());
  const std::size_t close = line.rfind("\", line ");
  if (close == npos) return std::nullopt;
  const std::string_view file = line.substr(0, close);
  const std::size_t in = line.find(", in ", close);
  TraceFrame f;
  f.function = capped(in == npos ? std::string_view("?") : line.substr(in + 5));
  f.file = capped(basename(file));
  f.internal = python_internal(file);
  return f;
}

std::optional<Found> parse_python(const std::vector<std::string_view>& lines) {
  const auto top = std::find_if(lines.rbegin(), lines.rend(),
                                [](std::string_view l) { return trim(l) == "Traceback (most recent call last):"; });
  if (top == lines.rend()) return std::nullopt;
  std::vector<TraceFrame> outermost_first;
  std::size_t i = static_cast<std::size_t>(lines.rend() - top);  // the line after `top`
  for (; i < lines.size(); ++i) {
    if (auto frame = python_frame(lines[i])) {
      if (outermost_first.size() == kMaxTraceFrames) outermost_first.erase(outermost_first.begin());
      outermost_first.push_back(std::move(*frame));
    } else if (lines[i].empty() || lines[i][0] != ' ') {
      break;  // source lines, carets and "[Previous line repeated N more times]" are indented
    }
  }
  if (i == lines.size()) return std::nullopt;  // cut off before the exception line
  auto exception = split_exception_line(lines[i]);
  if (!exception) return std::nullopt;
  Found found = found_of("python", std::move(*exception), i);
  found.traceback.frames.assign(outermost_first.rbegin(), outermost_first.rend());
  return found;
}

// ---- Node.js -----------------------------------------------------------------

// `    at parse (/path/x.js:5:11)`, `    at /path/x.js:2:15`,
// `    at async f (file:///x.mjs:1:1)`, `    at Array.map (<anonymous>)`.
bool is_node_frame(std::string_view line) { return line.starts_with("    at "); }

TraceFrame node_frame(std::string_view line) {
  std::string_view rest = line.substr(7);
  if (rest.starts_with("async ")) rest.remove_prefix(6);
  // The last frame of an error with own properties opens their listing: "... {".
  if (rest.ends_with(" {")) rest.remove_suffix(2);
  std::string_view function = "<anonymous>";
  std::string_view location = rest;
  const std::size_t open = rest.find(" (");
  if (open != npos && rest.back() == ')') {
    function = rest.substr(0, open);
    location = rest.substr(open + 2, rest.size() - open - 3);
    // "Function.executeUserEntryPoint [as runMain]": the alias is how it was called.
    if (const std::size_t alias = function.find(" [as "); alias != npos) function = function.substr(0, alias);
    // "eval at f (x.js:1:1), <anonymous>:1:1": the code eval ran.
    if (const std::size_t comma = location.rfind(", "); comma != npos) location = location.substr(comma + 2);
  }
  TraceFrame f;
  f.internal = location.starts_with("node:") || location.starts_with("internal/") || location == "<anonymous>" ||
               location == "native";
  if (location.starts_with("file://")) location.remove_prefix(7);
  // Drop ":line:column" (or just ":line").
  for (int part = 0; part < 2; ++part) {
    const std::size_t colon = location.rfind(':');
    if (colon == npos || !all_digits(location.substr(colon + 1))) break;
    location = location.substr(0, colon);
  }
  f.function = capped(function);
  f.file = capped(basename(location));
  return f;
}

std::optional<Found> parse_node(const std::vector<std::string_view>& lines) {
  // The last run of "at" lines; the exception's header is above it, after
  // the blank line that ends the "file.js:L", source and caret block.
  const auto at = std::find_if(lines.rbegin(), lines.rend(), is_node_frame);
  if (at == lines.rend()) return std::nullopt;
  const std::size_t last = static_cast<std::size_t>(lines.rend() - at) - 1;
  std::size_t first = last;
  while (first > 0 && is_node_frame(lines[first - 1])) --first;
  if (first == 0) return std::nullopt;
  // A multi-line message: its first line follows the blank line (or the
  // start of the text); looked for a bounded distance up.
  std::size_t header = first - 1;
  for (std::size_t k = 0; k < 64 && header > 0 && !lines[header - 1].empty() && !is_node_frame(lines[header - 1]);
       ++k) {
    --header;
  }
  std::optional<TypeAndMessage> exception;
  // From the top of the header block down: the first line that reads "Type: message".
  for (std::size_t h = header; h < first && !exception; ++h) exception = split_exception_line(lines[h]);
  if (!exception) return std::nullopt;
  // "TypeError [ERR_INVALID_ARG_TYPE]: ..." keeps its code as part of the type.
  Found found = found_of("node", std::move(*exception), last);
  for (std::size_t i = first; i <= last && found.traceback.frames.size() < kMaxTraceFrames; ++i) {
    found.traceback.frames.push_back(node_frame(lines[i]));
  }
  return found;
}

// ---- Java ----------------------------------------------------------------------

// "J$$Lambda$14/0x0000000801001000.accept" -> "J$$Lambda.accept": the number
// and the address depend on the order classes were loaded in, not on the bug.
std::string java_function(std::string_view name) {
  std::string out;
  for (std::size_t i = 0; i < name.size();) {
    if (name.substr(i, 3) == "/0x") {
      i += 3;
      while (i < name.size() && name[i] != '.') ++i;
    } else if (name.substr(i, 8) == "$Lambda$") {
      out += "$Lambda";
      i += 8;
      while (i < name.size() && is_digit(name[i])) ++i;
    } else {
      out += name[i++];
    }
  }
  return out;
}

bool java_internal(std::string_view module, std::string_view function) {
  for (std::string_view p : {"java.", "jdk.", "sun.", "com.sun."}) {
    if (module.starts_with(p) || function.starts_with(p)) return true;
  }
  return false;
}

// `\tat java.base/java.lang.Integer.parseInt(Integer.java:668)`,
// `\tat app//com.x.Parser.parse(Parser.java:5)`, `\tat J.main(J.java:5)`.
std::optional<TraceFrame> java_frame(std::string_view line) {
  if (!line.starts_with("\tat ")) return std::nullopt;
  std::string_view rest = line.substr(4);
  const std::size_t open = rest.find('(');
  if (open == npos || rest.back() != ')') return std::nullopt;
  std::string name = java_function(rest.substr(0, open));
  std::string_view location = rest.substr(open + 1, rest.size() - open - 2);
  std::string_view module;
  std::string_view function = name;
  if (const std::size_t slash = function.rfind('/'); slash != npos) {
    module = function.substr(0, function.find('/'));
    function = function.substr(slash + 1);
  }
  TraceFrame f;
  f.internal = java_internal(module, function);
  f.function = capped(function);
  f.file = capped(basename(location.substr(0, location.find(':'))));
  return f;
}

// `Exception in thread "main" java.lang.X: msg`, `Caused by: java.lang.X: msg`,
// or a bare `java.lang.X: msg` (printStackTrace) when frames follow it.
std::optional<TypeAndMessage> java_header(std::string_view line, bool frames_follow) {
  if (line.starts_with("Exception in thread \"")) {
    const std::size_t end = line.find("\" ", 21);
    if (end == npos) return std::nullopt;
    return split_exception_line(line.substr(end + 2));
  }
  if (line.starts_with("Caused by: ")) return split_exception_line(line.substr(11));
  if (frames_follow && !line.empty() && line[0] != '\t') return split_exception_line(line);
  return std::nullopt;
}

struct JavaBlock {
  TypeAndMessage exception;
  std::vector<TraceFrame> frames;
  std::size_t omitted = 0;  // "... N more": the last N frames of the enclosing exception
  std::size_t end_line = 0;
};

std::optional<Found> parse_java(const std::vector<std::string_view>& lines) {
  std::vector<JavaBlock> chain;  // the last chain seen: an exception and its causes
  bool suppressed = false;       // inside a "\tSuppressed:" block, which is not a cause
  for (std::size_t i = 0; i < lines.size(); ++i) {
    const std::string_view line = lines[i];
    const bool frames_follow = i + 1 < lines.size() && lines[i + 1].starts_with("\tat ");
    if (auto header = java_header(line, frames_follow)) {
      if (!line.starts_with("Caused by: ") || chain.empty()) chain.clear();
      chain.push_back(JavaBlock{std::move(*header), {}, 0, i});
      suppressed = false;
      continue;
    }
    if (chain.empty()) continue;
    if (line.starts_with("\tSuppressed: ")) {
      suppressed = true;
    } else if (suppressed) {
      continue;
    } else if (auto frame = java_frame(line)) {
      if (chain.back().frames.size() < kMaxTraceFrames) chain.back().frames.push_back(std::move(*frame));
      chain.back().end_line = i;
    } else if (line.starts_with("\t... ") && line.ends_with(" more")) {
      const std::string_view n = line.substr(5, line.size() - 10);
      chain.back().omitted = all_digits(n) && n.size() < 6 ? std::stoul(std::string(n)) : 0;
      chain.back().end_line = i;
    }
  }
  if (chain.empty() || chain.front().frames.empty()) return std::nullopt;
  JavaBlock& root = chain.back();
  Found found = found_of("java", std::move(root.exception), 0);
  found.traceback.frames = std::move(root.frames);
  if (chain.size() > 1 && root.omitted > 0) {
    const std::vector<TraceFrame>& outer = chain[chain.size() - 2].frames;
    const std::size_t n = std::min(root.omitted, outer.size());
    for (std::size_t k = outer.size() - n; k < outer.size() && found.traceback.frames.size() < kMaxTraceFrames; ++k) {
      found.traceback.frames.push_back(outer[k]);
    }
  }
  found.end_line = std::max_element(chain.begin(), chain.end(), [](const JavaBlock& a, const JavaBlock& b) {
                     return a.end_line < b.end_line;
                   })->end_line;
  return found;
}

// ---- Ruby ----------------------------------------------------------------------

bool ruby_internal(std::string_view file) {
  // "<internal:kernel>"; the standard library, but not gems installed beside it.
  if (file.starts_with("<internal:")) return true;
  return file.find("/lib/ruby/") != npos && file.find("/gems/") == npos;
}

// "file.rb:12:in `meth'" (Ruby before 3.4) or "file.rb:12:in 'Class#meth'"
// (3.4); returns the frame and what follows the closing quote.
std::optional<std::pair<TraceFrame, std::string_view>> ruby_location(std::string_view s) {
  std::size_t in = s.find(":in `");
  if (const std::size_t straight = s.find(":in '"); straight < in) in = straight;
  if (in == npos) return std::nullopt;
  const std::string_view file_line = s.substr(0, in);
  const std::size_t colon = file_line.rfind(':');
  if (colon == npos || !all_digits(file_line.substr(colon + 1))) return std::nullopt;
  const std::string_view after = s.substr(in + 5);
  const std::size_t close = after.find('\'');
  if (close == npos) return std::nullopt;
  TraceFrame f;
  const std::string_view file = file_line.substr(0, colon);
  f.function = capped(after.substr(0, close));
  f.file = capped(basename(file));
  f.internal = ruby_internal(file);
  return std::make_pair(std::move(f), after.substr(close + 1));
}

// `file.rb:2:in 'parse': bad "zz" (ArgumentError)`
std::optional<std::pair<TraceFrame, TypeAndMessage>> ruby_header(std::string_view line) {
  if (line.empty() || line[0] == '\t' || line.back() != ')') return std::nullopt;
  auto located = ruby_location(line);
  if (!located || !located->second.starts_with(": ")) return std::nullopt;
  const std::string_view rest = located->second.substr(2);
  // "msg (Class)", or "(Class)" alone for an empty message.
  const std::size_t open = rest.rfind(" (");
  if (open == npos && !rest.starts_with("(")) return std::nullopt;
  const std::size_t type_start = open == npos ? 1 : open + 2;
  const std::string_view type = rest.substr(type_start, rest.size() - type_start - 1);
  if (!is_type_name(type)) return std::nullopt;
  std::string_view message = open == npos ? std::string_view() : rest.substr(0, open);
  return std::make_pair(std::move(located->first), TypeAndMessage{std::string(type), capped(message, kMaxMessageBytes)});
}

std::optional<Found> parse_ruby(const std::vector<std::string_view>& lines) {
  // The last header: Ruby prints the exception that ended the program first
  // and its causes after it, so the last one is the root cause.
  for (std::size_t i = lines.size(); i-- > 0;) {
    auto header = ruby_header(lines[i]);
    if (!header) continue;
    Found found = found_of("ruby", std::move(header->second), i);
    found.traceback.frames.push_back(std::move(header->first));
    // A multi-line message sits between the header and the "from" lines.
    for (std::size_t k = i + 1; k < lines.size() && found.traceback.frames.size() < kMaxTraceFrames; ++k) {
      if (!lines[k].starts_with("\tfrom ")) {
        if (found.traceback.frames.size() > 1) break;
        continue;
      }
      auto frame = ruby_location(lines[k].substr(6));
      if (!frame) break;
      found.traceback.frames.push_back(std::move(frame->first));
      found.end_line = k;
    }
    return found;
  }
  return std::nullopt;
}

std::string frame_text(const TraceFrame& f) { return f.function + " (" + f.file + ")"; }

}  // namespace

std::optional<Traceback> parse_traceback(std::string_view text) {
  if (text.size() > kMaxTracebackInput) text.remove_prefix(text.size() - kMaxTracebackInput);
  const std::vector<std::string_view> lines = split_lines(text);
  std::optional<Found> best;
  for (auto parse : {parse_python, parse_node, parse_java, parse_ruby}) {
    auto found = parse(lines);
    if (found && (!best || found->end_line > best->end_line)) best = std::move(found);
  }
  if (!best) return std::nullopt;
  return std::move(best->traceback);
}

std::vector<std::string> traceback_state(const Traceback& traceback, std::size_t depth) {
  std::vector<std::string> state{traceback.exception_type};
  for (const TraceFrame& f : traceback.frames) {
    if (state.size() > depth) break;
    if (!f.internal) state.push_back(frame_text(f));
  }
  // Only the runtime's own frames (a bad argument to a builtin at the top
  // level): they are all there is to tell the failure by.
  if (state.size() == 1) {
    for (std::size_t i = 0; i < traceback.frames.size() && i < depth; ++i) state.push_back(frame_text(traceback.frames[i]));
  }
  return state;
}

}  // namespace pillbox
