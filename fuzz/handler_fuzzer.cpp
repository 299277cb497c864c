// libFuzzer harness: a built-in handler's input path, the code that runs on
// the payload in a confined child. Compiled once per handler, with
// PILLBOX_FUZZ_HANDLER naming it ("echo", "regex", "inflate", "pdf-text"); the
// input is the payload, as is (a seed is a real payload file).
//
// Each input runs through every configuration below, first with a large cap
// on the output, then, if that gave a non-empty result, with a cap one byte
// smaller than it. Properties checked beyond the sanitizers':
//   - run() returns, or throws std::bad_alloc or another std::exception (its
//     contract, sandbox/handler.h); anything else escaping is a finding;
//   - an ok result is never over the cap (for inflate: the decompression
//     bomb limit holds), and the smaller cap turns it into kOutputLimit;
//   - a rejection (kError, kOutputLimit) has a message and no output;
//   - echo returns the payload unchanged.
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <exception>
#include <memory>
#include <new>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "fuzz/fuzz_check.h"
#include "sandbox/handler.h"

#ifndef PILLBOX_FUZZ_HANDLER
#error "compile with -DPILLBOX_FUZZ_HANDLER=\"echo\" (or regex, inflate, pdf-text)"
#endif

#ifdef PILLBOX_FUZZ_PDF_TEXT
// pdf_text.cpp (and its pdf_text_warm_up.cpp) is linked into this harness
// instead of being loaded as libpillbox-pdf-text.so: this is the module's
// entry point, which the loader (pdf_text_loader.cpp) would find with dlsym.
extern "C" void pillbox_pdf_text_make(const pillbox::sandbox::HandlerArgs& args,
                                      pillbox::Expected<std::unique_ptr<pillbox::sandbox::Handler>>& out);
#endif

namespace {

using pillbox::sandbox::Handler;
using pillbox::sandbox::HandlerArgs;
using pillbox::sandbox::HandlerResult;
using pillbox::sandbox::HandlerStatus;

constexpr std::string_view kHandler = PILLBOX_FUZZ_HANDLER;
static_assert(kHandler == "echo" || kHandler == "regex" || kHandler == "inflate" || kHandler == "pdf-text",
              "PILLBOX_FUZZ_HANDLER names a built-in handler: echo, regex, inflate or pdf-text");
// 64 KiB: far above what echo, regex and pdf-text make of a short input, far
// below what inflate can (a 4 KiB deflate stream holds up to 4 MiB). Inflate
// decompresses all before comparing, so a smaller cap also fuzzes faster.
constexpr std::size_t kLargeCap = 64 * 1024;

// The argument sets each handler is prepared with. The regex pattern is
// linear-time on purpose: every repetition is bounded, so no input can make
// the backtracking matcher exponential or recurse deeply (both are by design
// for hostile patterns, and pillbox contains them; they are not findings).
std::vector<HandlerArgs> configurations() {
  if (kHandler == "regex") {
    const std::string pattern =
        R"(\b(\d{1,3})(?:\.\d{1,3}){3}\b|(["'])[^"'\n]{0,32}\2|[A-Z][a-z]{1,16}(?=[ ,.;]))";
    return {{{"pattern", pattern}, {"mode", "search"}, {"icase", "no"}},
            {{"pattern", pattern}, {"mode", "match"}, {"icase", "yes"}}};
  }
  if (kHandler == "inflate") return {{{"format", "auto"}}, {{"format", "raw"}}};
  return {{}};
}

pillbox::Expected<std::unique_ptr<Handler>> make(const HandlerArgs& args) {
#ifdef PILLBOX_FUZZ_PDF_TEXT
  pillbox::Expected<std::unique_ptr<Handler>> handler = pillbox::Error{"no handler"};
  pillbox_pdf_text_make(args, handler);
  return handler;
#else
  // The factory directly: the registry (make_handler) would link the plugin
  // and pdf-text loaders too.
  if constexpr (kHandler == "echo") {
    return pillbox::sandbox::make_echo_handler(args);
  } else if constexpr (kHandler == "regex") {
    return pillbox::sandbox::make_regex_handler(args);
  } else if constexpr (kHandler == "inflate") {
    return pillbox::sandbox::make_inflate_handler(args);
  } else {
    return pillbox::Error{"unknown handler"};
  }
#endif
}

std::vector<std::unique_ptr<Handler>>& handlers() {
  static std::vector<std::unique_ptr<Handler>> prepared = [] {
    std::vector<std::unique_ptr<Handler>> all;
    for (const HandlerArgs& args : configurations()) {
      auto handler = make(args);
      if (!handler) {
        std::fprintf(stderr, "handler_fuzzer: cannot prepare %s: %s\n", kHandler.data(), handler.error().c_str());
        std::abort();
      }
      all.push_back(std::move(*handler));
    }
    return all;
  }();
  return prepared;
}

// The handler's result, or nullopt when it threw what its contract allows.
std::optional<HandlerResult> run(Handler& handler, std::string_view payload, std::size_t cap) {
  try {
    return handler.run(payload, cap);
  } catch (const std::bad_alloc&) {
    return std::nullopt;
  } catch (const std::exception&) {
    return std::nullopt;
  }
}

void check(const HandlerResult& r, std::size_t cap) {
  switch (r.status) {
    case HandlerStatus::kOk:
      FUZZ_CHECK(r.output.size() <= cap);
      break;
    case HandlerStatus::kError:
    case HandlerStatus::kOutputLimit:
      FUZZ_CHECK(!r.message.empty());
      FUZZ_CHECK(r.output.empty());
      break;
    default:
      FUZZ_CHECK(!"a HandlerStatus value");
  }
}

}  // namespace

extern "C" int LLVMFuzzerInitialize(int* /*argc*/, char*** /*argv*/) {
  handlers();  // prepare once, like the zygote, before the first input
  return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  const std::string_view payload(reinterpret_cast<const char*>(data), size);
  for (const std::unique_ptr<Handler>& handler : handlers()) {
    const auto first = run(*handler, payload, kLargeCap);
    if (!first) continue;
    check(*first, kLargeCap);
    if (first->status != HandlerStatus::kOk) continue;
    if (kHandler == "echo") FUZZ_CHECK(first->output == payload);
    if (first->output.empty()) continue;
    // One byte less room: the same result no longer fits.
    const std::size_t smaller = first->output.size() - 1;
    const auto second = run(*handler, payload, smaller);
    if (!second) continue;
    check(*second, smaller);
    FUZZ_CHECK(second->status == HandlerStatus::kOutputLimit);
  }
  return 0;
}
