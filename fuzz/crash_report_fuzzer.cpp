// libFuzzer harness: the crash-report parser and the fingerprint normalizer.
// Crash reports come from a pipe any process of the task can write to, and
// symbol names from files a hostile child may point at: both are hostile.
#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "shared/crash_report.h"
#include "shared/fingerprint.h"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  const std::string_view text(reinterpret_cast<const char*>(data), size);
  for (const pillbox::CrashReport& report : pillbox::parse_crash_reports(text)) {
    if (report.frames.size() > pillbox::kMaxCrashFrames) __builtin_trap();
  }
  // The same bytes as demangled names: lines become frames.
  std::vector<pillbox::SymbolizedFrame> frames;
  std::size_t start = 0;
  while (start <= text.size() && frames.size() < 128) {
    const std::size_t end = std::min(text.find('\n', start), text.size());
    const std::string_view line = text.substr(start, end - start);
    frames.push_back({"/usr/lib/libfuzz.so", start, std::string(line)});
    (void)pillbox::normalize_function(line);
    start = end + 1;
  }
  const auto state = pillbox::crash_state(frames);
  const auto recursion = pillbox::recursion_state(frames);
  if (state.size() > 3 || recursion.size() > 3) __builtin_trap();
  (void)pillbox::frames_recurse(frames);
  (void)pillbox::normalize_message(text);
  return 0;
}
