// The "inflate" handler: zlib decompression of the whole payload in memory,
// the way a naive consumer does it. There is deliberately no cap while
// decompressing: a gzip bomb must really allocate until the memory limit
// stops it (std::bad_alloc under RLIMIT_AS, or the cgroup OOM killer), which
// is the failure pillbox exists to contain and report as `oom`.
#include <algorithm>
#include <limits>
#include <new>
#include <stdexcept>

#define ZLIB_CONST  // next_in is const: the payload is read, never written
#include <zlib.h>

#include "sandbox/handler.h"

namespace pillbox::handlers {

using sandbox::HandlerResult;
using sandbox::HandlerStatus;

// Kept out of line: this frame is the bug site that crash fingerprints name.
[[gnu::noinline]] HandlerResult inflate_payload(std::string_view compressed, int window_bits,
                                                std::size_t max_output) {
  z_stream zs{};
  if (const int rc = inflateInit2(&zs, window_bits); rc != Z_OK) {
    if (rc == Z_MEM_ERROR) throw std::bad_alloc();
    throw std::runtime_error(std::string("zlib could not start inflating: ") + zError(rc));
  }
  struct InflateEnd {
    z_stream* zs;
    ~InflateEnd() { inflateEnd(zs); }
  } end{&zs};

  constexpr std::size_t kMaxChunk = std::numeric_limits<uInt>::max();  // avail_* are 32-bit
  std::size_t fed = 0;  // payload bytes handed to zlib so far
  std::string out;
  std::size_t produced = 0;
  for (;;) {
    if (zs.avail_in == 0 && fed < compressed.size()) {
      zs.next_in = reinterpret_cast<const Bytef*>(compressed.data() + fed);
      zs.avail_in = static_cast<uInt>(std::min(compressed.size() - fed, kMaxChunk));
      fed += zs.avail_in;
    }
    if (produced == out.size()) {
      // Grow geometrically, and really touch the memory (resize zero-fills)
      // so a bomb is charged to the cgroup as it grows.
      out.resize(std::max<std::size_t>(out.size() * 2, 64 * 1024));
    }
    zs.next_out = reinterpret_cast<Bytef*>(out.data() + produced);
    zs.avail_out = static_cast<uInt>(std::min(out.size() - produced, kMaxChunk));
    const uInt room = zs.avail_out;

    const int rc = inflate(&zs, Z_NO_FLUSH);
    produced += room - zs.avail_out;
    const std::size_t unread = compressed.size() - fed + zs.avail_in;
    const std::size_t offset = compressed.size() - unread;

    if (rc == Z_STREAM_END && unread == 0) break;
    switch (rc) {
      case Z_STREAM_END:
        inflateReset(&zs);  // another member follows (concatenated gzip files)
        break;
      case Z_OK:
        break;
      case Z_BUF_ERROR:  // no progress: this input chunk is used up (refilled above) or the payload is
        if (unread == 0) return {HandlerStatus::kError, {}, "truncated compressed stream"};
        break;
      case Z_DATA_ERROR:
        return {HandlerStatus::kError, {},
                std::string("corrupt compressed data: ") + (zs.msg ? zs.msg : "invalid data") +
                    " (at byte " + std::to_string(offset) + ")"};
      case Z_NEED_DICT:
        return {HandlerStatus::kError, {},
                "compressed stream needs a preset dictionary (at byte " + std::to_string(offset) + ")"};
      case Z_MEM_ERROR:
        throw std::bad_alloc();
      default:
        throw std::runtime_error(std::string("zlib inflate failed: ") + zError(rc));
    }
  }
  out.resize(produced);

  if (out.size() > max_output) {
    return {HandlerStatus::kOutputLimit, {},
            "decompressed " + std::to_string(out.size()) + " bytes, over the cap of " +
                std::to_string(max_output)};
  }
  return {HandlerStatus::kOk, std::move(out), {}};
}

}  // namespace pillbox::handlers

namespace pillbox::sandbox {
namespace {

class InflateHandler final : public Handler {
 public:
  explicit InflateHandler(int window_bits) : window_bits_(window_bits) {}

  HandlerResult run(std::string_view payload, std::size_t max_output) override {
    return handlers::inflate_payload(payload, window_bits_, max_output);
  }

 private:
  const int window_bits_;
};

}  // namespace

Expected<std::unique_ptr<Handler>> make_inflate_handler(const HandlerArgs& args) {
  for (const auto& [key, value] : args) {
    if (key != "format") {
      return Error{"handler 'inflate' does not take --arg '" + key + "' (it takes: format)"};
    }
  }
  // zlib's windowBits selects the container: +32 detects gzip or zlib from
  // the header, +16 expects gzip, negative means raw deflate.
  int window_bits = MAX_WBITS + 32;
  if (const auto it = args.find("format"); it != args.end()) {
    if (it->second == "gzip") {
      window_bits = MAX_WBITS + 16;
    } else if (it->second == "zlib") {
      window_bits = MAX_WBITS;
    } else if (it->second == "raw") {
      window_bits = -MAX_WBITS;
    } else if (it->second != "auto") {
      return Error{"handler 'inflate': --arg format must be auto, gzip, zlib or raw, not '" + it->second + "'"};
    }
  }
  return std::unique_ptr<Handler>(std::make_unique<InflateHandler>(window_bits));
}

}  // namespace pillbox::sandbox
