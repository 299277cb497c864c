#include "shared/wire.h"

#include <sys/random.h>

#include <cerrno>
#include <cstring>
#include <msgpack.hpp>
#include <stdexcept>

namespace pillbox {
namespace {

// Number of array elements each frame type carries, header included.
std::size_t expected_length(FrameType type) {
  switch (type) {
    case FrameType::kHello: return 5;
    case FrameType::kSetupFailed: return 5;
    case FrameType::kTask: return 5;
    case FrameType::kResult: return 7;
  }
  return 0;
}

bool valid_type(std::uint64_t t) { return t >= 1 && t <= 4; }

std::string_view as_bytes(const msgpack::object& o, const char* what, std::size_t max) {
  if (o.type == msgpack::type::BIN) {
    if (o.via.bin.size > max) throw std::runtime_error(std::string(what) + " too large");
    return {o.via.bin.ptr, o.via.bin.size};
  }
  if (o.type == msgpack::type::STR) {
    if (o.via.str.size > max) throw std::runtime_error(std::string(what) + " too large");
    return {o.via.str.ptr, o.via.str.size};
  }
  throw std::runtime_error(std::string(what) + " is not bytes");
}

std::uint64_t as_uint(const msgpack::object& o, const char* what) {
  if (o.type != msgpack::type::POSITIVE_INTEGER) {
    throw std::runtime_error(std::string(what) + " is not an unsigned integer");
  }
  return o.via.u64;
}

}  // namespace

std::string_view to_string(FrameType type) {
  switch (type) {
    case FrameType::kHello: return "HELLO";
    case FrameType::kSetupFailed: return "SETUP_FAILED";
    case FrameType::kTask: return "TASK";
    case FrameType::kResult: return "RESULT";
  }
  return "?";
}

std::string encode_frame(const Frame& f) {
  msgpack::sbuffer buf(f.data.size() + 128);
  msgpack::packer<msgpack::sbuffer> pk(buf);
  pk.pack_array(static_cast<std::uint32_t>(expected_length(f.type)));
  pk.pack_uint32(kWireVersion);
  pk.pack_uint8(static_cast<std::uint8_t>(f.type));
  pk.pack_uint64(f.task);
  pk.pack_bin(kSecretSize);
  pk.pack_bin_body(reinterpret_cast<const char*>(f.secret.data()), kSecretSize);
  switch (f.type) {
    case FrameType::kHello:
      pk.pack_int64(f.pid);
      break;
    case FrameType::kSetupFailed:
      pk.pack_str(static_cast<std::uint32_t>(f.message.size()));
      pk.pack_str_body(f.message.data(), f.message.size());
      break;
    case FrameType::kTask:
      pk.pack_bin(static_cast<std::uint32_t>(f.data.size()));
      pk.pack_bin_body(f.data.data(), f.data.size());
      break;
    case FrameType::kResult:
      pk.pack_uint8(static_cast<std::uint8_t>(f.status));
      pk.pack_bin(static_cast<std::uint32_t>(f.data.size()));
      pk.pack_bin_body(f.data.data(), f.data.size());
      pk.pack_str(static_cast<std::uint32_t>(f.message.size()));
      pk.pack_str_body(f.message.data(), f.message.size());
      break;
  }
  return std::string(buf.data(), buf.size());
}

Expected<Frame> decode_frame(std::string_view bytes, std::size_t max_bytes) {
  if (bytes.size() > max_bytes) {
    return Error{"frame of " + std::to_string(bytes.size()) + " bytes exceeds the cap of " +
                 std::to_string(max_bytes)};
  }
  try {
    // Limits keep a hostile frame from making the decoder allocate: at most a
    // flat array of 8, no maps, no nesting, no ext.
    const msgpack::unpack_limit limit(/*array=*/8, /*map=*/0, /*str=*/max_bytes, /*bin=*/max_bytes,
                                      /*ext=*/0, /*depth=*/2);
    std::size_t off = 0;
    msgpack::object_handle oh =
        msgpack::unpack(bytes.data(), bytes.size(), off, nullptr, nullptr, limit);
    if (off != bytes.size()) return Error{"trailing bytes after the frame"};
    const msgpack::object& root = oh.get();
    if (root.type != msgpack::type::ARRAY) return Error{"frame is not an array"};
    const auto& arr = root.via.array;
    if (arr.size < 4) return Error{"frame has " + std::to_string(arr.size) + " fields, fewer than the header"};
    const std::uint64_t version = as_uint(arr.ptr[0], "version");
    if (version != kWireVersion) {
      return Error{"wire version " + std::to_string(version) + " (this supervisor speaks " +
                   std::to_string(kWireVersion) + ")"};
    }
    const std::uint64_t type = as_uint(arr.ptr[1], "type");
    if (!valid_type(type)) return Error{"unknown frame type " + std::to_string(type)};
    Frame f;
    f.type = static_cast<FrameType>(type);
    if (arr.size != expected_length(f.type)) {
      return Error{std::string(to_string(f.type)) + " frame has " + std::to_string(arr.size) +
                   " fields, expected " + std::to_string(expected_length(f.type))};
    }
    f.task = as_uint(arr.ptr[2], "task");
    if (arr.ptr[3].type != msgpack::type::BIN || arr.ptr[3].via.bin.size != kSecretSize) {
      return Error{"secret is not " + std::to_string(kSecretSize) + " bytes"};
    }
    std::memcpy(f.secret.data(), arr.ptr[3].via.bin.ptr, kSecretSize);
    switch (f.type) {
      case FrameType::kHello: {
        const auto& o = arr.ptr[4];
        if (o.type == msgpack::type::POSITIVE_INTEGER) f.pid = static_cast<std::int64_t>(o.via.u64);
        else if (o.type == msgpack::type::NEGATIVE_INTEGER) f.pid = o.via.i64;
        else return Error{"pid is not an integer"};
        break;
      }
      case FrameType::kSetupFailed:
        f.message = std::string(as_bytes(arr.ptr[4], "message", kMaxMessageBytes));
        break;
      case FrameType::kTask:
        f.data = std::string(as_bytes(arr.ptr[4], "payload", max_bytes));
        break;
      case FrameType::kResult: {
        const std::uint64_t status = as_uint(arr.ptr[4], "status");
        if (status > static_cast<std::uint64_t>(ResultStatus::kExecFailed)) {
          return Error{"unknown result status " + std::to_string(status)};
        }
        f.status = static_cast<ResultStatus>(status);
        f.data = std::string(as_bytes(arr.ptr[5], "output", max_bytes));
        f.message = std::string(as_bytes(arr.ptr[6], "message", kMaxMessageBytes));
        break;
      }
    }
    return f;
  } catch (const std::exception& e) {
    return Error{std::string("malformed frame: ") + e.what()};
  }
}

bool secrets_equal(const Secret& a, const Secret& b) {
  std::uint8_t diff = 0;
  for (std::size_t i = 0; i < kSecretSize; ++i) diff |= static_cast<std::uint8_t>(a[i] ^ b[i]);
  return diff == 0;
}

Secret random_secret() {
  Secret s{};
  std::size_t got = 0;
  while (got < s.size()) {
    const ssize_t n = getrandom(s.data() + got, s.size() - got, 0);
    if (n < 0) {
      if (errno == EINTR) continue;
      throw std::runtime_error(std::string("getrandom: ") + std::strerror(errno));
    }
    got += static_cast<std::size_t>(n);
  }
  return s;
}

}  // namespace pillbox
