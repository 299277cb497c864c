#pragma once
// Reads the uncaught-exception report a Python, Node.js, Java or Ruby
// runtime prints on stderr into a type, message and frames, so a failing
// exec program gets a crash state (docs/architecture.md, 'Frames and crash
// state').
//
// The text is the child's, so hostile: only the last kMaxTracebackInput
// bytes are read, in a few linear passes, with at most kMaxTraceFrames frames
// per exception, so any input costs bounded work. A fake traceback only
// renames the child's own failure (the handler identity is in every
// fingerprint).
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

// The last uncaught-exception report in `text`, or nullopt. Which exception
// of a chain is taken:
//   Python: the last traceback printed ("During handling of the above
//           exception..." / "The above exception was the direct cause..."
//           print the one that ended the program last);
//   Java:   the root cause (the last "Caused by:"), since the outer ones are
//           most often wrappers (RuntimeException, InvocationTargetException)
//           thrown by generic code; its frames omitted as "... N more" are
//           taken from the exception that encloses it;
//   Ruby:   the root cause as well, which Ruby prints last.
std::optional<Traceback> parse_traceback(std::string_view text);

// The exception's type, then up to `depth` frames, innermost first, each
// "function (file)", skipping the runtime's own frames unless nothing else
// is left (like crash_state() for native frames).
std::vector<std::string> traceback_state(const Traceback& traceback, std::size_t depth = 3);

}  // namespace pillbox
