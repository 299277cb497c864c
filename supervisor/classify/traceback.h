#pragma once
// The uncaught-exception report a scripting runtime prints on stderr before
// it exits non-zero (Python's "Traceback (most recent call last):", Node.js's
// "    at f (file.js:L:C)" lines, Java's "Exception in thread" and "\tat"
// lines, Ruby's "file.rb:N:in 'meth': msg (Class)" and "\tfrom" lines), read
// back into an exception type, its message and its frames: the scripting
// counterpart of a native crash report, so that a failing exec program gets
// a crash state like a crashing one does (docs/architecture.md, 'Frames and
// crash state').
//
// The text is the child's: hostile. The parser reads only the last
// kMaxTracebackInput bytes of what it is given (the stderr tail kept per
// attempt), in a few linear passes, and takes at most kMaxTraceFrames frames
// per exception: a child that prints a million frames, one gigantic line,
// invalid UTF-8 or nested fake markers costs the same bounded work. A child
// can print a fake traceback; it only names its own failure by it (the
// handler identity is in every fingerprint).
#include <cstddef>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace pillbox {

inline constexpr std::size_t kMaxTracebackInput = 8192;
inline constexpr std::size_t kMaxTraceFrames = 256;

struct TraceFrame {
  std::string function;   // as the runtime names it ("parse", "Object#parse", "com.x.Parser.parse")
  std::string file;       // base name only: "parser.py"; never a line number
  bool internal = false;  // the runtime's own code (importlib, node:internal, java.base, the stdlib)
};

struct Traceback {
  std::string language;        // "python", "node", "java" or "ruby"
  std::string exception_type;  // "ValueError", "TypeError", "java.lang.NumberFormatException", "ArgumentError"
  std::string message;         // the first line of the exception's message, as printed (may be "")
  std::vector<TraceFrame> frames;  // innermost first
};

// The last uncaught-exception report in `text` (only its last
// kMaxTracebackInput bytes are read), or nullopt when there is none. Which
// exception of a chain is taken:
//   Python: the last traceback printed ("During handling of the above
//           exception..." / "The above exception was the direct cause..."
//           print the one that ended the program last);
//   Java:   the root cause (the last "Caused by:"), since the outer ones are
//           most often wrappers (RuntimeException, InvocationTargetException)
//           thrown by generic code; its frames omitted as "... N more" are
//           taken from the exception that encloses it;
//   Ruby:   the root cause as well, which Ruby prints last.
std::optional<Traceback> parse_traceback(std::string_view text);

// The crash state of an uncaught exception: its type, then up to `depth`
// frames, innermost first, each "function (file)", skipping the runtime's
// own frames (all of them when nothing else is left, like crash_state() does
// for native frames).
std::vector<std::string> traceback_state(const Traceback& traceback, std::size_t depth = 3);

}  // namespace pillbox
