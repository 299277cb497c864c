// libFuzzer harness: the crash-report parser and the fingerprint normalizer,
// from hostile text to a fingerprint. Crash reports come from a pipe any
// process of the task can write to, and symbol names and module paths from
// files a hostile child may point at: all of it is hostile.
//
// The input is read three ways:
//   1. as the crash pipe: parse_crash_reports; each report's raw frames (no
//      symbols: hostile module paths and offsets) go through crash_state,
//      frames_recurse, recursion_state and make_fingerprint, as the
//      classifier does for a frame the symbolizer cannot name;
//   2. as demangled names, one frame per line ("module<TAB>function" sets
//      the module too): normalize_function, crash_state, recursion_state,
//      frames_recurse and make_fingerprint;
//   3. as a handler's error message: normalize_message and make_fingerprint.
// Properties checked: at most 64 frames per report; crash states of 1 to 3
// non-empty entries (none when there are no frames); fingerprints of the form
// pb1-<16 hex digits>; normalized messages of one line, at most 200 bytes,
// trimmed, with every number replaced (no digit left but the 0 of "0xN").
#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "fuzz/fuzz_check.h"
#include "shared/crash_report.h"
#include "shared/failure_kind.h"
#include "shared/fingerprint.h"

namespace {

using pillbox::SymbolizedFrame;

void check_state(const std::vector<std::string>& state, const std::vector<SymbolizedFrame>& frames) {
  FUZZ_CHECK(state.size() <= 3);
  FUZZ_CHECK(state.empty() == frames.empty());
  for (const std::string& entry : state) FUZZ_CHECK(!entry.empty());
}

void check_fingerprint(const std::string& fp) {
  FUZZ_CHECK(fp.size() == 4 + 16 && fp.starts_with("pb1-"));
  FUZZ_CHECK(fp.find_first_not_of("0123456789abcdef", 4) == std::string::npos);
}

// What the classifier does with the frames of a crash or a stack overflow.
void fingerprint_frames(const std::vector<SymbolizedFrame>& frames) {
  const auto state = pillbox::crash_state(frames);
  check_state(state, frames);
  const auto recursion = pillbox::recursion_state(frames);
  check_state(recursion, frames);
  const bool recurses = pillbox::frames_recurse(frames);
  FUZZ_CHECK(!recurses || frames.size() >= pillbox::kMaxCrashFrames);
  const pillbox::Kind kind = recurses ? pillbox::Kind::kStackOverflow : pillbox::Kind::kCrash;
  check_fingerprint(pillbox::make_fingerprint(kind, "SIGSEGV", recurses ? recursion : state, "regex pattern=(a|b)*"));
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  const std::string_view text(reinterpret_cast<const char*>(data), size);

  // 1. The crash pipe.
  for (const pillbox::CrashReport& report : pillbox::parse_crash_reports(text)) {
    FUZZ_CHECK(report.frames.size() <= pillbox::kMaxCrashFrames);
    std::vector<SymbolizedFrame> frames;
    for (const pillbox::RawFrame& raw : report.frames) frames.push_back({raw.module, raw.offset, ""});
    fingerprint_frames(frames);
  }

  // 2. The same bytes as demangled names: lines become frames.
  std::vector<SymbolizedFrame> frames;
  std::size_t start = 0;
  while (start <= text.size() && frames.size() < 128) {
    const std::size_t end = std::min(text.find('\n', start), text.size());
    std::string_view line = text.substr(start, end - start);
    SymbolizedFrame frame{"/usr/lib/libfuzz.so", start, ""};
    if (const std::size_t tab = line.find('\t'); tab != std::string_view::npos) {
      frame.module = std::string(line.substr(0, tab));
      line.remove_prefix(tab + 1);
    }
    frame.function = std::string(line);
    (void)pillbox::normalize_function(line);
    frames.push_back(std::move(frame));
    start = end + 1;
  }
  fingerprint_frames(frames);
  // The 64-frame window of a report, as the classifier sees it.
  if (frames.size() > pillbox::kMaxCrashFrames) {
    frames.resize(pillbox::kMaxCrashFrames);
    fingerprint_frames(frames);
  }

  // 3. A handler's error message.
  const std::string message = pillbox::normalize_message(text);
  FUZZ_CHECK(message.size() <= 200);
  FUZZ_CHECK(message.find_first_of("\r\n") == std::string::npos);
  for (std::size_t i = message.find_first_of("0123456789"); i != std::string::npos;
       i = message.find_first_of("0123456789", i + 1)) {
    // The only digit left is the 0 of "0xN" (perhaps cut short at 200 bytes).
    FUZZ_CHECK(std::string_view("0xN").starts_with(std::string_view(message).substr(i, 3)));
  }
  FUZZ_CHECK(message.empty() || (message.find_first_of(" \t") != 0 && message.find_last_of(" \t") != message.size() - 1));
  check_fingerprint(pillbox::make_fingerprint(pillbox::Kind::kHandlerError, message, {}, "inflate format=auto"));
  return 0;
}
