// libFuzzer harness: the uncaught-exception reader and the message
// normalizer, from a hostile stderr tail to a fingerprint. An exec program
// writes its stderr as it likes; the classifier reads its last 8 KiB after a
// non-zero exit (supervisor/classify/traceback.h).
//
// Properties checked: at most kMaxTraceFrames frames; a non-empty exception
// type; names and the message bounded; frames with no line numbers in their
// file names' place (no "/" in a base name); a crash state of the type and
// 0 to 3 frames; a normalized message of one line, at most 200 bytes, with
// no digit but the 0 of "0xX"; a fingerprint of the form pb1-<16 hex digits>.
#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

#include "fuzz/fuzz_check.h"
#include "shared/failure_kind.h"
#include "shared/fingerprint.h"
#include "supervisor/classify/exception_message.h"
#include "supervisor/classify/traceback.h"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  const std::string_view text(reinterpret_cast<const char*>(data), size);
  if (const auto tb = pillbox::parse_traceback(text)) {
    FUZZ_CHECK(!tb->exception_type.empty() && tb->exception_type.size() <= 200);
    FUZZ_CHECK(tb->message.size() <= 1024);
    FUZZ_CHECK(tb->frames.size() <= pillbox::kMaxTraceFrames);
    for (const auto& f : tb->frames) {
      FUZZ_CHECK(f.function.size() <= 200 && f.file.size() <= 200);
      FUZZ_CHECK(f.file.find('/') == std::string::npos);
    }
    const auto state = pillbox::traceback_state(*tb);
    FUZZ_CHECK(!state.empty() && state.size() <= 4 && state[0] == tb->exception_type);
    const std::string key = pillbox::exception_message_key(tb->message, {"/scratch"});
    FUZZ_CHECK(key.size() <= 200);
    const std::string fp = pillbox::make_fingerprint(pillbox::Kind::kHandlerError, key, state, "exec python3 p.py {}");
    FUZZ_CHECK(fp.size() == 20 && fp.starts_with("pb1-"));
  }
  // The normalizer on its own, on the raw text.
  const std::string key = pillbox::exception_message_key(text, {"/scratch"});
  FUZZ_CHECK(key.size() <= 200);
  FUZZ_CHECK(key.find_first_of("\r\n") == std::string::npos);
  for (std::size_t i = key.find_first_of("123456789"); i != std::string::npos; i = key.find_first_of("123456789", i + 1)) {
    FUZZ_CHECK(false);  // every digit run became N
  }
  return 0;
}
