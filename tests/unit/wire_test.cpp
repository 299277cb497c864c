#include "shared/wire.h"

#include <doctest/doctest.h>

#include <chrono>
#include <cstdint>
#include <limits>
#include <msgpack.hpp>
#include <random>
#include <string>
#include <string_view>
#include <vector>

#include "tests/unit/cpu_clock.h"

namespace pillbox {
namespace {

using namespace std::string_literals;
using Packer = msgpack::packer<msgpack::sbuffer>;

constexpr std::size_t kCap = 1 << 20;

Secret test_secret() {
  Secret s{};
  for (std::size_t i = 0; i < s.size(); ++i) s[i] = static_cast<std::uint8_t>(0xa0 + i);
  return s;
}

Frame make(FrameType type) {
  Frame f;
  f.type = type;
  f.task = 0x1234'5678'9abcULL;
  f.secret = test_secret();
  return f;
}

void check_same(const Frame& a, const Frame& b) {
  CHECK(a.type == b.type);
  CHECK(a.task == b.task);
  CHECK(a.secret == b.secret);
  CHECK(a.pid == b.pid);
  CHECK(a.status == b.status);
  CHECK(a.data == b.data);
  CHECK(a.message == b.message);
}

// Builds a frame by hand: the header, then `extra` fields packed by the caller.
template <class Fn>
std::string raw_frame(std::uint32_t fields, std::uint64_t version, std::uint64_t type, Fn&& rest) {
  msgpack::sbuffer buf;
  Packer pk(buf);
  pk.pack_array(fields);
  pk.pack_uint64(version);
  pk.pack_uint64(type);
  rest(pk);
  return std::string(buf.data(), buf.size());
}

void pack_task_and_secret(Packer& pk, std::size_t secret_size = kSecretSize) {
  pk.pack_uint64(7);
  const std::string secret(secret_size, '\x5a');
  pk.pack_bin(static_cast<std::uint32_t>(secret.size()));
  pk.pack_bin_body(secret.data(), secret.size());
}

std::string decode_error(std::string_view bytes, std::size_t max = kCap) {
  auto r = decode_frame(bytes, max);
  REQUIRE_FALSE(r.has_value());
  CHECK_FALSE(r.error().empty());
  return r.error();
}

bool contains(const std::string& haystack, std::string_view needle) {
  return haystack.find(needle) != std::string::npos;
}

TEST_CASE("wire: HELLO round trip keeps the pid, task and secret") {
  for (std::int64_t pid : {std::int64_t{0}, std::int64_t{1}, std::int64_t{4242}, std::int64_t{-1},
                           std::numeric_limits<std::int64_t>::max(),
                           std::numeric_limits<std::int64_t>::min()}) {
    CAPTURE(pid);
    Frame f = make(FrameType::kHello);
    f.pid = pid;
    auto d = decode_frame(encode_frame(f), kCap);
    REQUIRE_MESSAGE(d.has_value(), d.error());
    check_same(*d, f);
  }
}

TEST_CASE("wire: SETUP_FAILED round trip keeps the message") {
  Frame f = make(FrameType::kSetupFailed);
  f.message = "seccomp: cannot load filter: Invalid argument";
  auto d = decode_frame(encode_frame(f), kCap);
  REQUIRE_MESSAGE(d.has_value(), d.error());
  check_same(*d, f);
  CHECK(d->message == "seccomp: cannot load filter: Invalid argument");

  f.message.clear();
  auto empty = decode_frame(encode_frame(f), kCap);
  REQUIRE(empty.has_value());
  CHECK(empty->message.empty());
}

TEST_CASE("wire: TASK round trip keeps binary payloads byte for byte") {
  SUBCASE("empty") {
    Frame f = make(FrameType::kTask);
    auto d = decode_frame(encode_frame(f), kCap);
    REQUIRE(d.has_value());
    CHECK(d->data.empty());
    check_same(*d, f);
  }
  SUBCASE("NUL bytes and every byte value") {
    Frame f = make(FrameType::kTask);
    f.data = "\0a\0\0b\xff\x80"s;
    for (int i = 0; i < 256; ++i) f.data += static_cast<char>(i);
    auto d = decode_frame(encode_frame(f), kCap);
    REQUIRE(d.has_value());
    CHECK(d->data.size() == 7 + 256);
    check_same(*d, f);
  }
  SUBCASE("1 MiB") {
    Frame f = make(FrameType::kTask);
    f.data.resize(1 << 20);
    std::mt19937 rng(7);
    for (auto& c : f.data) c = static_cast<char>(rng());
    const std::string bytes = encode_frame(f);
    CHECK(bytes.size() > (1u << 20));
    auto d = decode_frame(bytes, (1u << 20) + kFrameOverhead);
    REQUIRE_MESSAGE(d.has_value(), d.error());
    check_same(*d, f);
  }
}

TEST_CASE("wire: RESULT round trip for every status") {
  for (ResultStatus status : {ResultStatus::kOk, ResultStatus::kHandlerError, ResultStatus::kOutputLimit,
                              ResultStatus::kOutOfMemory, ResultStatus::kExecFailed}) {
    CAPTURE(static_cast<int>(status));
    Frame f = make(FrameType::kResult);
    f.status = status;
    f.data = "out\0put\xfe"s;
    f.message = "bad header at offset 12";
    auto d = decode_frame(encode_frame(f), kCap);
    REQUIRE_MESSAGE(d.has_value(), d.error());
    check_same(*d, f);
  }
}

TEST_CASE("wire: to_string names every frame type") {
  CHECK(to_string(FrameType::kHello) == "HELLO");
  CHECK(to_string(FrameType::kSetupFailed) == "SETUP_FAILED");
  CHECK(to_string(FrameType::kTask) == "TASK");
  CHECK(to_string(FrameType::kResult) == "RESULT");
}

TEST_CASE("wire: wrong version is rejected and named") {
  const std::string bytes = raw_frame(5, 2, 1, [](Packer& pk) {
    pack_task_and_secret(pk);
    pk.pack_int64(1);
  });
  const std::string err = decode_error(bytes);
  CHECK(contains(err, "wire version 2"));

  // A version that is not an unsigned integer.
  msgpack::sbuffer buf;
  Packer pk(buf);
  pk.pack_array(5);
  pk.pack_str(1);
  pk.pack_str_body("1", 1);
  pk.pack_uint8(1);
  pack_task_and_secret(pk);
  pk.pack_int64(1);
  CHECK(contains(decode_error(std::string_view(buf.data(), buf.size())), "version is not an unsigned integer"));
}

TEST_CASE("wire: unknown frame types are rejected and named") {
  for (std::uint64_t type : {std::uint64_t{0}, std::uint64_t{5}, std::uint64_t{255}, std::uint64_t{1} << 40}) {
    CAPTURE(type);
    const std::string bytes = raw_frame(5, kWireVersion, type, [](Packer& pk) {
      pack_task_and_secret(pk);
      pk.pack_int64(1);
    });
    CHECK(decode_error(bytes) == "unknown frame type " + std::to_string(type));
  }
}

TEST_CASE("wire: wrong field count for each frame type") {
  struct Case {
    FrameType type;
    std::uint32_t right;
  };
  for (Case c : {Case{FrameType::kHello, 5}, Case{FrameType::kSetupFailed, 5}, Case{FrameType::kTask, 5},
                 Case{FrameType::kResult, 7}}) {
    for (std::uint32_t n : {c.right - 1, c.right + 1}) {
      if (n > 8) continue;  // beyond the decoder's array limit: covered below
      CAPTURE(to_string(c.type));
      CAPTURE(n);
      const std::string bytes = raw_frame(n, kWireVersion, static_cast<std::uint64_t>(c.type), [&](Packer& pk) {
        pack_task_and_secret(pk);
        for (std::uint32_t i = 4; i < n; ++i) pk.pack_uint8(0);
      });
      CHECK(decode_error(bytes) == std::string(to_string(c.type)) + " frame has " + std::to_string(n) +
                                       " fields, expected " + std::to_string(c.right));
    }
  }
  // Fewer fields than the header itself.
  const std::string short_frame = raw_frame(3, kWireVersion, 1, [](Packer& pk) { pk.pack_uint8(7); });
  CHECK(decode_error(short_frame) == "frame has 3 fields, fewer than the header");
  // More than the decoder's flat-array limit of 8.
  const std::string long_frame = raw_frame(9, kWireVersion, 4, [](Packer& pk) {
    pack_task_and_secret(pk);
    for (int i = 0; i < 5; ++i) pk.pack_uint8(0);
  });
  CHECK(contains(decode_error(long_frame), "malformed frame"));
}

TEST_CASE("wire: secret must be exactly 16 bytes of bin") {
  for (std::size_t size : {std::size_t{0}, std::size_t{15}, std::size_t{17}, std::size_t{64}}) {
    CAPTURE(size);
    const std::string bytes = raw_frame(5, kWireVersion, 1, [&](Packer& pk) {
      pack_task_and_secret(pk, size);
      pk.pack_int64(1);
    });
    CHECK(decode_error(bytes) == "secret is not 16 bytes");
  }
  // 16 bytes, but as a str rather than bin.
  const std::string as_str = raw_frame(5, kWireVersion, 1, [](Packer& pk) {
    pk.pack_uint64(7);
    pk.pack_str(16);
    pk.pack_str_body("0123456789abcdef", 16);
    pk.pack_int64(1);
  });
  CHECK(decode_error(as_str) == "secret is not 16 bytes");
}

TEST_CASE("wire: task id must be an unsigned integer") {
  SUBCASE("string") {
    const std::string bytes = raw_frame(5, kWireVersion, 1, [](Packer& pk) {
      pk.pack_str(1);
      pk.pack_str_body("7", 1);
      pk.pack_bin(16);
      pk.pack_bin_body("0123456789abcdef", 16);
      pk.pack_int64(1);
    });
    CHECK(contains(decode_error(bytes), "task is not an unsigned integer"));
  }
  SUBCASE("negative") {
    const std::string bytes = raw_frame(5, kWireVersion, 1, [](Packer& pk) {
      pk.pack_int64(-7);
      pk.pack_bin(16);
      pk.pack_bin_body("0123456789abcdef", 16);
      pk.pack_int64(1);
    });
    CHECK(contains(decode_error(bytes), "task is not an unsigned integer"));
  }
  SUBCASE("float") {
    // Written by hand: msgpack-c's pack_double() would store 7.0 as an integer.
    msgpack::sbuffer buf;
    Packer pk(buf);
    pk.pack_array(5);
    pk.pack_uint8(1);
    pk.pack_uint8(1);
    buf.write("\xcb\x40\x1c\x00\x00\x00\x00\x00\x00", 9);  // float64 7.0
    pk.pack_bin(16);
    pk.pack_bin_body("0123456789abcdef", 16);
    pk.pack_int64(1);
    CHECK(contains(decode_error(std::string_view(buf.data(), buf.size())), "task is not an unsigned integer"));
    const std::string half = raw_frame(5, kWireVersion, 1, [](Packer& p) {
      p.pack_double(7.5);
      p.pack_bin(16);
      p.pack_bin_body("0123456789abcdef", 16);
      p.pack_int64(1);
    });
    CHECK(contains(decode_error(half), "task is not an unsigned integer"));
  }
}

TEST_CASE("wire: field types of the bodies are checked") {
  SUBCASE("HELLO pid as a string") {
    const std::string bytes = raw_frame(5, kWireVersion, 1, [](Packer& pk) {
      pack_task_and_secret(pk);
      pk.pack_str(3);
      pk.pack_str_body("123", 3);
    });
    CHECK(decode_error(bytes) == "pid is not an integer");
  }
  SUBCASE("TASK payload as an integer") {
    const std::string bytes = raw_frame(5, kWireVersion, 3, [](Packer& pk) {
      pack_task_and_secret(pk);
      pk.pack_uint8(3);
    });
    CHECK(contains(decode_error(bytes), "payload is not bytes"));
  }
  SUBCASE("RESULT message over the message cap") {
    Frame f = make(FrameType::kResult);
    f.message.assign(kMaxMessageBytes + 1, 'm');
    CHECK(contains(decode_error(encode_frame(f)), "message too large"));
    f.message.assign(kMaxMessageBytes, 'm');
    CHECK(decode_frame(encode_frame(f), kCap).has_value());
  }
  SUBCASE("SETUP_FAILED message over the message cap") {
    Frame f = make(FrameType::kSetupFailed);
    f.message.assign(kMaxMessageBytes + 1, 'm');
    CHECK(contains(decode_error(encode_frame(f)), "message too large"));
  }
}

TEST_CASE("wire: trailing bytes after a valid frame") {
  Frame f = make(FrameType::kHello);
  f.pid = 9;
  const std::string bytes = encode_frame(f);
  CHECK(decode_error(bytes + "\x00"s) == "trailing bytes after the frame");
  CHECK(decode_error(bytes + bytes) == "trailing bytes after the frame");
}

TEST_CASE("wire: frames over max_bytes are refused before parsing") {
  Frame f = make(FrameType::kTask);
  f.data.assign(1000, 'x');
  const std::string bytes = encode_frame(f);
  CHECK(decode_frame(bytes, bytes.size()).has_value());
  CHECK(decode_error(bytes, bytes.size() - 1) ==
        "frame of " + std::to_string(bytes.size()) + " bytes exceeds the cap of " + std::to_string(bytes.size() - 1));
}

TEST_CASE("wire: the root must be an array") {
  CHECK(decode_error("\x07"s) == "frame is not an array");              // positive fixint
  CHECK(decode_error("\xa3" "abc"s) == "frame is not an array");        // fixstr
  CHECK(decode_error("\xc0"s) == "frame is not an array");              // nil
  CHECK(decode_error("\x80"s) == "frame is not an array");              // empty map
  // A non-empty map exceeds the decoder's map limit of 0.
  CHECK(contains(decode_error("\x81\x01\x02"s), "malformed frame"));
  CHECK(contains(decode_error(""), "malformed frame"));
}

TEST_CASE("wire: nested and deep structures are refused") {
  // A nested array where the task id belongs.
  const std::string nested = raw_frame(5, kWireVersion, 1, [](Packer& pk) {
    pk.pack_array(1);
    pk.pack_uint8(7);
    pk.pack_bin(16);
    pk.pack_bin_body("0123456789abcdef", 16);
    pk.pack_int64(1);
  });
  CHECK(contains(decode_error(nested), "task is not an unsigned integer"));

  // 1000 nested arrays: over the depth limit, refused without recursion.
  std::string deep(1000, '\x91');
  deep += '\x01';
  CHECK(contains(decode_error(deep), "malformed frame"));

  // A map inside the array.
  const std::string with_map = raw_frame(5, kWireVersion, 1, [](Packer& pk) {
    pack_task_and_secret(pk);
    pk.pack_map(1);
    pk.pack_uint8(1);
    pk.pack_uint8(2);
  });
  CHECK(contains(decode_error(with_map), "malformed frame"));

  // ext types are refused.
  const std::string with_ext = raw_frame(5, kWireVersion, 1, [](Packer& pk) {
    pack_task_and_secret(pk);
    pk.pack_ext(1, 1);
    pk.pack_ext_body("x", 1);
  });
  CHECK(contains(decode_error(with_ext), "malformed frame"));
}

TEST_CASE("wire: a 4 GiB length prefix in a short buffer is an error, quickly") {
  const double start = pillbox::test::thread_cpu_seconds();  // CPU, not wall: see cpu_clock.h
  for (unsigned char prefix : {0xc6 /* bin32 */, 0xdb /* str32 */}) {
    CAPTURE(static_cast<int>(prefix));
    // [1, TASK, 7, secret, <bin32 of 0xffffffff bytes>] with only 3 bytes of body.
    std::string bytes = raw_frame(5, kWireVersion, 3, [](Packer& pk) { pack_task_and_secret(pk); });
    bytes += static_cast<char>(prefix);
    bytes += "\xff\xff\xff\xff" "abc"s;
    CHECK(contains(decode_error(bytes, kCap), "malformed frame"));
    // Even when the caller's cap is enormous.
    CHECK(contains(decode_error(bytes, std::numeric_limits<std::size_t>::max()), "malformed frame"));
    // As the root object itself.
    std::string root;
    root += static_cast<char>(prefix);
    root += "\xff\xff\xff\xf0"s;
    CHECK(contains(decode_error(root, std::numeric_limits<std::size_t>::max()), "malformed frame"));
  }
  // An array32 header claiming 4 G elements.
  CHECK(contains(decode_error("\xdd\xff\xff\xff\xff\x01"s, std::numeric_limits<std::size_t>::max()),
                 "malformed frame"));
  CHECK(pillbox::test::thread_cpu_seconds() - start < 1.0);
}

TEST_CASE("wire: result status out of range") {
  for (std::uint64_t status : {std::uint64_t{5}, std::uint64_t{200}, std::uint64_t{1} << 33}) {
    CAPTURE(status);
    const std::string bytes = raw_frame(7, kWireVersion, 4, [&](Packer& pk) {
      pack_task_and_secret(pk);
      pk.pack_uint64(status);
      pk.pack_bin(0);
      pk.pack_str(0);
    });
    CHECK(decode_error(bytes) == "unknown result status " + std::to_string(status));
  }
  const std::string negative = raw_frame(7, kWireVersion, 4, [](Packer& pk) {
    pack_task_and_secret(pk);
    pk.pack_int8(-1);
    pk.pack_bin(0);
    pk.pack_str(0);
  });
  CHECK(contains(decode_error(negative), "status is not an unsigned integer"));
}

TEST_CASE("wire: str and bin are both accepted for byte fields") {
  const std::string bytes = raw_frame(7, kWireVersion, 4, [](Packer& pk) {
    pack_task_and_secret(pk);
    pk.pack_uint8(0);
    pk.pack_str(3);
    pk.pack_str_body("out", 3);
    pk.pack_bin(3);
    pk.pack_bin_body("msg", 3);
  });
  auto d = decode_frame(bytes, kCap);
  REQUIRE_MESSAGE(d.has_value(), d.error());
  CHECK(d->type == FrameType::kResult);
  CHECK(d->task == 7);
  CHECK(d->data == "out");
  CHECK(d->message == "msg");
}

TEST_CASE("wire: secrets_equal") {
  const Secret a = test_secret();
  Secret b = a;
  CHECK(secrets_equal(a, b));
  for (std::size_t i = 0; i < kSecretSize; ++i) {
    CAPTURE(i);
    Secret c = a;
    c[i] ^= 0x01;
    CHECK_FALSE(secrets_equal(a, c));
    c[i] = a[i] ^ 0x80;
    CHECK_FALSE(secrets_equal(c, a));
  }
  CHECK(secrets_equal(Secret{}, Secret{}));
}

TEST_CASE("wire: random_secret gives fresh values") {
  const Secret a = random_secret();
  const Secret b = random_secret();
  const Secret c = random_secret();
  CHECK_FALSE(secrets_equal(a, b));
  CHECK_FALSE(secrets_equal(b, c));
  CHECK_FALSE(secrets_equal(a, c));
  CHECK_FALSE(secrets_equal(a, Secret{}));
}

TEST_CASE("wire: mutated frames never crash the decoder") {
  std::vector<std::string> seeds;
  {
    Frame f = make(FrameType::kHello);
    f.pid = 31337;
    seeds.push_back(encode_frame(f));
    f = make(FrameType::kSetupFailed);
    f.message = "no cgroup";
    seeds.push_back(encode_frame(f));
    f = make(FrameType::kTask);
    f.data = std::string("pay\0load", 8) + std::string(300, 'p');  // long enough for bin16
    seeds.push_back(encode_frame(f));
    f = make(FrameType::kResult);
    f.status = ResultStatus::kHandlerError;
    f.data = "output";
    f.message = "it failed";
    seeds.push_back(encode_frame(f));
  }
  static constexpr unsigned char kInteresting[] = {0x00, 0xff, 0x7f, 0x80, 0xc0, 0xc1, 0xc4, 0xc5, 0xc6, 0xd9,
                                                   0xda, 0xdb, 0xdc, 0xdd, 0xde, 0xdf, 0x90, 0x9f, 0x95, 0x97};
  std::mt19937_64 rng(0x5eed);
  std::size_t decoded = 0, rejected = 0;
  for (int iter = 0; iter < 6000; ++iter) {
    std::string bytes = seeds[static_cast<std::size_t>(iter) % seeds.size()];
    const int mutations = 1 + static_cast<int>(rng() % 4);
    for (int m = 0; m < mutations; ++m) {
      if (bytes.empty()) bytes.push_back('\0');
      const std::size_t pos = rng() % bytes.size();
      switch (rng() % 5) {
        case 0: bytes[pos] = static_cast<char>(bytes[pos] ^ (1 << (rng() % 8))); break;
        case 1: bytes.resize(pos); break;
        case 2: {
          const std::size_t n = 1 + rng() % 8;
          std::string ins;
          for (std::size_t i = 0; i < n; ++i) ins += static_cast<char>(rng());
          bytes.insert(pos, ins);
          break;
        }
        case 3: bytes[pos] = static_cast<char>(kInteresting[rng() % sizeof kInteresting]); break;
        case 4: bytes.erase(pos, 1 + rng() % 4); break;
      }
    }
    const std::size_t cap = (iter % 3 == 0) ? 64 : kCap;
    auto r = decode_frame(bytes, cap);
    if (r.has_value()) {
      ++decoded;
      // Whatever decodes must survive its own re-encoding unchanged.
      const int type = static_cast<int>(r->type);
      REQUIRE(type >= 1);
      REQUIRE(type <= 4);
      REQUIRE(static_cast<int>(r->status) <= 3);
      auto again = decode_frame(encode_frame(*r), kCap);
      REQUIRE(again.has_value());
      REQUIRE(again->data == r->data);
      REQUIRE(again->message == r->message);
      REQUIRE(again->task == r->task);
      REQUIRE(again->pid == r->pid);
    } else {
      ++rejected;
      REQUIRE_FALSE(r.error().empty());
    }
  }
  CHECK(decoded + rejected == 6000);
  CHECK(rejected > 1000);  // most mutations break the strict shape
}

}  // namespace
}  // namespace pillbox
