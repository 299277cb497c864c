// libFuzzer harness: the supervisor's frame decoder, which reads bytes a
// hostile child chose. Besides "never crash, never hang, never leak" (the
// sanitizers' part), it checks a property: whatever decodes re-encodes to a
// frame that decodes to the same fields.
#include <cstddef>
#include <cstdint>
#include <string_view>

#include "fuzz/fuzz_check.h"
#include "shared/wire.h"

namespace {

constexpr std::size_t kCap = 1 << 20;

bool same(const pillbox::Frame& a, const pillbox::Frame& b) {
  return a.type == b.type && a.task == b.task && a.secret == b.secret && a.pid == b.pid && a.status == b.status &&
         a.data == b.data && a.message == b.message;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  const std::string_view bytes(reinterpret_cast<const char*>(data), size);
  auto frame = pillbox::decode_frame(bytes, kCap);
  if (!frame) return 0;
  const auto again = pillbox::decode_frame(pillbox::encode_frame(*frame), kCap + pillbox::kFrameOverhead);
  FUZZ_CHECK(again.has_value());
  FUZZ_CHECK(same(*frame, *again));
  return 0;
}
