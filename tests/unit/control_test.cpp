#include "shared/control.h"

#include <fcntl.h>
#include <unistd.h>

#include <doctest/doctest.h>

#include <cstdint>
#include <msgpack.hpp>
#include <random>
#include <string>
#include <string_view>
#include <vector>

namespace pillbox {
namespace {

using namespace std::string_literals;

constexpr std::size_t kCap = 4 << 20;

bool contains(const std::string& haystack, std::string_view needle) {
  return haystack.find(needle) != std::string::npos;
}

struct Pipe {
  int r = -1, w = -1;
  Pipe() {
    int fds[2];
    REQUIRE(::pipe2(fds, O_CLOEXEC) == 0);
    r = fds[0];
    w = fds[1];
  }
  ~Pipe() {
    if (r >= 0) ::close(r);
    if (w >= 0) ::close(w);
  }
  void close_write() {
    ::close(w);
    w = -1;
  }
};

ChildConfig full_config() {
  ChildConfig c;
  c.handler = "exec";
  c.args = {{"flags", "icase"}, {"pattern", "a+b"}, {"empty", ""}, {"bin\xff", "v\0x"s}};
  c.policy.name = "strict";
  c.policy.origin = "/etc/pillbox/strict.policy";
  c.policy.limits.cpu_ms = 1234;
  c.policy.limits.wall_ms = 5678;
  c.policy.limits.memory_bytes = 3ull << 30;
  c.policy.limits.file_size_bytes = 77;
  c.policy.limits.open_files = 9;
  c.policy.limits.processes = 3;
  c.policy.limits.stack_bytes = 1 << 20;
  c.policy.limits.output_bytes = 0xffff'ffff'ffffULL;
  c.policy.isolation.network = true;
  c.policy.isolation.user = "pillbox-sandbox";
  c.policy.isolation.uid_pool_first = 2000000000;
  c.policy.isolation.uid_pool_size = 64;
  c.policy.isolation.cgroup = CgroupMode::kOff;
  c.policy.isolation.filesystem = FilesystemMode::kHost;
  c.policy.isolation.tmp_bytes = 64 << 20;
  c.policy.isolation.writable = {"/srv/out"};
  c.policy.isolation.shared = {"/tmp/tools", "/srv/data"};
  c.policy.seccomp.enabled = false;
  c.policy.seccomp.default_action = SeccompDefault::kErrno;
  c.policy.seccomp.allow = {"read", "write", "futex"};
  c.exec_argv = {"/usr/bin/prog", "--in", "{}", ""};
  c.exec_payload_as_file = true;
  c.crash_lib = "/opt/pillbox/libpillbox-crash.so";
  c.drop_privileges = true;
  c.sandbox_uid = 1001;
  c.sandbox_gid = 0xffff'fffe;
  c.use_namespaces = false;
  c.check_uid = 2000000007;
  c.working_dir = "/srv/parsers";
  return c;
}

std::vector<ControlMessage> every_message() {
  std::vector<ControlMessage> v;
  ControlMessage m;

  m = {};
  m.type = ControlType::kConfig;
  m.config = full_config();
  v.push_back(m);

  m = {};
  m.type = ControlType::kReady;
  m.ready.pid = 4321;
  m.ready.isolation = {"netns", "ipcns", "utsns"};
  m.ready.warnings = {"no cgroup v2: using RLIMIT_AS", ""};
  v.push_back(m);

  m = {};
  m.type = ControlType::kFailed;
  m.message = "invalid handler configuration: unknown handler 'nope'";
  m.error_code = ErrorCode::kConfig;
  v.push_back(m);

  m = {};
  m.type = ControlType::kFork;
  m.ticket.seq = 0xdead'beef'0001ULL;
  m.ticket.endpoint = "ipc:///run/pillbox-1000/t42";
  for (std::size_t i = 0; i < kSecretSize; ++i) m.ticket.secret[i] = static_cast<std::uint8_t>(i * 17);
  m.ticket.cgroup_procs = {"/sys/fs/cgroup/pillbox/slot0/cgroup.procs", "/x/cgroup.procs"};
  m.ticket.uid = 2000000003;
  m.ticket.gid = 2000000004;
  m.ticket.key = std::string("contacts/contacts-011.csv\0\xff", 27);  // a key is bytes
  v.push_back(m);

  m = {};
  m.type = ControlType::kForked;
  m.seq = 42;
  m.pid = 99999;
  v.push_back(m);

  m = {};
  m.type = ControlType::kForkFailed;
  m.seq = 43;
  m.message = "fork: Resource temporarily unavailable";
  v.push_back(m);

  m = {};
  m.type = ControlType::kKill;
  m.pid = 7;
  v.push_back(m);

  m = {};
  m.type = ControlType::kExited;
  m.exit.seq = 44;
  m.exit.pid = 12345;
  m.exit.wait_status = -1;
  m.exit.utime_us = 1'500'000;
  m.exit.stime_us = 250'000;
  m.exit.max_rss_kb = 65536;
  m.exit.crash = "pillbox-crash 1\npid 12345\nsignal 11\n\0\xff\xfe"s;
  m.exit.stdout_data = "\0\1\2 binary \xff"s;
  m.exit.stdout_size = 1ull << 40;
  m.exit.stderr_tail = "warning\nerror: \x80\x81"s;
  m.exit.seccomp_watched = true;
  m.exit.violation_nr = 41;
  m.exit.violation_arch = 0xc000003e;
  m.exit.slot_renewed = true;
  v.push_back(m);
  return v;
}

void check_same(const ControlMessage& a, const ControlMessage& b) {
  REQUIRE(a.type == b.type);
  switch (a.type) {
    case ControlType::kConfig: {
      const ChildConfig& x = a.config;
      const ChildConfig& y = b.config;
      CHECK(x.handler == y.handler);
      CHECK(x.args == y.args);
      CHECK(x.policy.name == y.policy.name);
      CHECK(x.policy.origin == y.policy.origin);
      CHECK(x.policy.limits.cpu_ms == y.policy.limits.cpu_ms);
      CHECK(x.policy.limits.wall_ms == y.policy.limits.wall_ms);
      CHECK(x.policy.limits.memory_bytes == y.policy.limits.memory_bytes);
      CHECK(x.policy.limits.file_size_bytes == y.policy.limits.file_size_bytes);
      CHECK(x.policy.limits.open_files == y.policy.limits.open_files);
      CHECK(x.policy.limits.processes == y.policy.limits.processes);
      CHECK(x.policy.limits.stack_bytes == y.policy.limits.stack_bytes);
      CHECK(x.policy.limits.output_bytes == y.policy.limits.output_bytes);
      CHECK(x.policy.isolation.network == y.policy.isolation.network);
      CHECK(x.policy.isolation.user == y.policy.isolation.user);
      CHECK(x.policy.isolation.uid_pool_first == y.policy.isolation.uid_pool_first);
      CHECK(x.policy.isolation.uid_pool_size == y.policy.isolation.uid_pool_size);
      CHECK(x.policy.isolation.cgroup == y.policy.isolation.cgroup);
      CHECK(x.policy.isolation.filesystem == y.policy.isolation.filesystem);
      CHECK(x.policy.isolation.tmp_bytes == y.policy.isolation.tmp_bytes);
      CHECK(x.policy.isolation.writable == y.policy.isolation.writable);
      CHECK(x.policy.isolation.shared == y.policy.isolation.shared);
      CHECK(x.policy.seccomp.enabled == y.policy.seccomp.enabled);
      CHECK(x.policy.seccomp.default_action == y.policy.seccomp.default_action);
      CHECK(x.policy.seccomp.allow == y.policy.seccomp.allow);
      CHECK(x.exec_argv == y.exec_argv);
      CHECK(x.exec_payload_as_file == y.exec_payload_as_file);
      CHECK(x.crash_lib == y.crash_lib);
      CHECK(x.drop_privileges == y.drop_privileges);
      CHECK(x.sandbox_uid == y.sandbox_uid);
      CHECK(x.sandbox_gid == y.sandbox_gid);
      CHECK(x.use_namespaces == y.use_namespaces);
      CHECK(x.check_uid == y.check_uid);
      CHECK(x.working_dir == y.working_dir);
      break;
    }
    case ControlType::kReady:
      CHECK(a.ready.pid == b.ready.pid);
      CHECK(a.ready.isolation == b.ready.isolation);
      CHECK(a.ready.warnings == b.ready.warnings);
      break;
    case ControlType::kFailed:
      CHECK(a.message == b.message);
      CHECK(a.error_code == b.error_code);
      break;
    case ControlType::kFork:
      CHECK(a.ticket.seq == b.ticket.seq);
      CHECK(a.ticket.endpoint == b.ticket.endpoint);
      CHECK(a.ticket.secret == b.ticket.secret);
      CHECK(a.ticket.cgroup_procs == b.ticket.cgroup_procs);
      CHECK(a.ticket.uid == b.ticket.uid);
      CHECK(a.ticket.gid == b.ticket.gid);
      CHECK(a.ticket.key == b.ticket.key);
      break;
    case ControlType::kForked:
      CHECK(a.seq == b.seq);
      CHECK(a.pid == b.pid);
      break;
    case ControlType::kForkFailed:
      CHECK(a.seq == b.seq);
      CHECK(a.message == b.message);
      break;
    case ControlType::kExited:
      CHECK(a.exit.seq == b.exit.seq);
      CHECK(a.exit.pid == b.exit.pid);
      CHECK(a.exit.wait_status == b.exit.wait_status);
      CHECK(a.exit.utime_us == b.exit.utime_us);
      CHECK(a.exit.stime_us == b.exit.stime_us);
      CHECK(a.exit.max_rss_kb == b.exit.max_rss_kb);
      CHECK(a.exit.crash == b.exit.crash);
      CHECK(a.exit.stdout_data == b.exit.stdout_data);
      CHECK(a.exit.stdout_size == b.exit.stdout_size);
      CHECK(a.exit.stderr_tail == b.exit.stderr_tail);
      CHECK(a.exit.seccomp_watched == b.exit.seccomp_watched);
      CHECK(a.exit.violation_nr == b.exit.violation_nr);
      CHECK(a.exit.violation_arch == b.exit.violation_arch);
      CHECK(a.exit.slot_renewed == b.exit.slot_renewed);
      break;
    case ControlType::kKill:
      CHECK(a.pid == b.pid);
      break;
  }
}

std::uint32_t prefix_of(const std::string& encoded) {
  const auto* p = reinterpret_cast<const unsigned char*>(encoded.data());
  return (std::uint32_t{p[0]} << 24) | (std::uint32_t{p[1]} << 16) | (std::uint32_t{p[2]} << 8) | p[3];
}

std::string body_of(const std::string& encoded) { return encoded.substr(4); }

std::string with_prefix(const std::string& body) {
  std::string out(4, '\0');
  const auto len = static_cast<std::uint32_t>(body.size());
  out[0] = static_cast<char>(len >> 24);
  out[1] = static_cast<char>(len >> 16);
  out[2] = static_cast<char>(len >> 8);
  out[3] = static_cast<char>(len);
  return out + body;
}

TEST_CASE("control: every message type round-trips with all fields") {
  for (const ControlMessage& m : every_message()) {
    CAPTURE(static_cast<int>(m.type));
    const std::string encoded = encode_control(m);
    REQUIRE(encoded.size() > 4);
    CHECK(prefix_of(encoded) == encoded.size() - 4);
    auto d = decode_control(body_of(encoded), kCap);
    REQUIRE_MESSAGE(d.has_value(), d.error());
    check_same(*d, m);
  }
}

TEST_CASE("control: every policy enum value round-trips") {
  for (auto cg : {CgroupMode::kAuto, CgroupMode::kRequired, CgroupMode::kOff}) {
    for (auto fsm : {FilesystemMode::kHost, FilesystemMode::kReadOnly}) {
      for (auto act : {SeccompDefault::kTrap, SeccompDefault::kKill, SeccompDefault::kErrno}) {
        ControlMessage m;
        m.type = ControlType::kConfig;
        m.config.handler = "regex";
        m.config.policy.isolation.cgroup = cg;
        m.config.policy.isolation.filesystem = fsm;
        m.config.policy.seccomp.default_action = act;
        auto d = decode_control(body_of(encode_control(m)), kCap);
        REQUIRE(d.has_value());
        CHECK(d->config.policy.isolation.cgroup == cg);
        CHECK(d->config.policy.isolation.filesystem == fsm);
        CHECK(d->config.policy.seccomp.default_action == act);
        CHECK(d->config.args.empty());
        CHECK(d->config.exec_argv.empty());
      }
    }
  }
}

TEST_CASE("control: a FAILED message carries its error code, and only a known one") {
  for (ErrorCode code : {ErrorCode::kSetup, ErrorCode::kUsage, ErrorCode::kConfig}) {
    CAPTURE(static_cast<int>(code));
    ControlMessage m;
    m.type = ControlType::kFailed;
    m.message = "why";
    m.error_code = code;
    auto d = decode_control(body_of(encode_control(m)), kCap);
    REQUIRE_MESSAGE(d.has_value(), d.error());
    CHECK(d->message == "why");
    CHECK(d->error_code == code);
  }
  // The message is the same whatever the code: the supervisor goes by the code.
  ControlMessage setup;
  setup.type = ControlType::kFailed;
  setup.message = std::string(kConfigErrorPrefix) + "looks like a config error";
  auto d = decode_control(body_of(encode_control(setup)), kCap);
  REQUIRE(d.has_value());
  CHECK(d->error_code == ErrorCode::kSetup);

  msgpack::sbuffer buf;
  msgpack::packer<msgpack::sbuffer> pk(buf);
  pk.pack_array(3);
  pk.pack_uint32(kControlVersion);
  pk.pack_uint8(static_cast<std::uint8_t>(ControlType::kFailed));
  pk.pack_array(2);
  pk.pack_str(3);
  pk.pack_str_body("why", 3);
  pk.pack_uint8(3);  // no such ErrorCode
  auto unknown = decode_control(std::string(buf.data(), buf.size()), kCap);
  REQUIRE_FALSE(unknown.has_value());
  CHECK(contains(unknown.error(), "enum value out of range"));
}

TEST_CASE("control: a config without a handler is refused") {
  ControlMessage m;
  m.type = ControlType::kConfig;
  auto d = decode_control(body_of(encode_control(m)), kCap);
  REQUIRE_FALSE(d.has_value());
  CHECK(d.error() == "config without a handler");
}

TEST_CASE("control: version, type and size are checked") {
  auto pack = [](std::uint64_t version, std::uint64_t type) {
    msgpack::sbuffer buf;
    msgpack::packer<msgpack::sbuffer> pk(buf);
    pk.pack_array(3);
    pk.pack_uint64(version);
    pk.pack_uint64(type);
    pk.pack_array(2);  // a FAILED body: message, error code
    pk.pack_str(2);
    pk.pack_str_body("hi", 2);
    pk.pack_uint8(0);
    return std::string(buf.data(), buf.size());
  };
  auto ok = decode_control(pack(kControlVersion, 3), kCap);
  REQUIRE(ok.has_value());
  CHECK(ok->type == ControlType::kFailed);
  CHECK(ok->message == "hi");

  auto bad_version = decode_control(pack(2, 3), kCap);
  REQUIRE_FALSE(bad_version.has_value());
  CHECK(bad_version.error() == "control protocol version mismatch");

  auto bad_type = decode_control(pack(kControlVersion, 9), kCap);
  REQUIRE_FALSE(bad_type.has_value());
  CHECK(contains(bad_type.error(), "enum value out of range"));

  // 0 is not a ControlType either (the enum starts at kConfig = 1).
  auto zero_type = decode_control(pack(kControlVersion, 0), kCap);
  CHECK_FALSE(zero_type.has_value());

  const std::string body = body_of(encode_control(every_message()[0]));
  auto too_big = decode_control(body, body.size() - 1);
  REQUIRE_FALSE(too_big.has_value());
  CHECK(too_big.error() == "control message exceeds " + std::to_string(body.size() - 1) + " bytes");

  auto trailing = decode_control(body + "\x01", kCap);
  REQUIRE_FALSE(trailing.has_value());
  CHECK(trailing.error() == "trailing bytes after control message");
}

TEST_CASE("control: truncated bodies are errors") {
  for (const ControlMessage& m : every_message()) {
    CAPTURE(static_cast<int>(m.type));
    const std::string body = body_of(encode_control(m));
    for (std::size_t n = 0; n < body.size(); ++n) {
      auto d = decode_control(std::string_view(body).substr(0, n), kCap);
      REQUIRE_FALSE(d.has_value());
      REQUIRE(contains(d.error(), "malformed control message"));
    }
  }
}

TEST_CASE("control: garbage and mutated bodies never crash the decoder") {
  std::vector<std::string> seeds;
  for (const ControlMessage& m : every_message()) seeds.push_back(body_of(encode_control(m)));
  std::mt19937_64 rng(0xc0ffee);
  std::size_t errors = 0;
  std::size_t invalid_types = 0;
  for (int iter = 0; iter < 4000; ++iter) {
    std::string bytes;
    if (iter % 10 == 0) {
      bytes.resize(rng() % 64);
      for (auto& c : bytes) c = static_cast<char>(rng());
    } else {
      bytes = seeds[static_cast<std::size_t>(iter) % seeds.size()];
      for (int m = 0; m < 1 + static_cast<int>(rng() % 3); ++m) {
        if (bytes.empty()) break;
        const std::size_t pos = rng() % bytes.size();
        switch (rng() % 3) {
          case 0: bytes[pos] = static_cast<char>(bytes[pos] ^ (1 << (rng() % 8))); break;
          case 1: bytes.resize(pos); break;
          case 2: bytes.insert(pos, 1, static_cast<char>(rng())); break;
        }
      }
    }
    auto d = decode_control(bytes, 1 << 16);
    if (!d.has_value()) {
      ++errors;
      REQUIRE_FALSE(d.error().empty());
    } else if (static_cast<int>(d->type) < 1 || static_cast<int>(d->type) > 8) {
      ++invalid_types;  // decoded into a value outside the ControlType enum
    }
  }
  CHECK(errors > 400);
  CHECK(invalid_types == 0);
}

// Feeds `stream` into a pipe in chunks of the sizes `next_chunk` yields and
// collects every message a ControlReader produces.
template <class ChunkFn>
std::vector<ControlMessage> feed(const std::string& stream, ChunkFn next_chunk) {
  Pipe p;
  REQUIRE(::fcntl(p.r, F_SETFL, O_NONBLOCK) == 0);
  ControlReader reader(kCap);
  std::vector<ControlMessage> out;
  auto drain = [&] {
    while (auto item = reader.next()) {
      REQUIRE_MESSAGE(item->has_value(), item->error());
      out.push_back(std::move(item->value()));
    }
  };
  std::size_t pos = 0;
  while (pos < stream.size()) {
    const std::size_t n = std::min(next_chunk(), stream.size() - pos);
    REQUIRE(write_all(p.w, std::string_view(stream).substr(pos, n)).is_ok());
    pos += n;
    REQUIRE(reader.read_from(p.r));
    drain();
  }
  // Nothing more available: still true (EAGAIN), no message.
  REQUIRE(reader.read_from(p.r));
  CHECK_FALSE(reader.next().has_value());
  p.close_write();
  CHECK_FALSE(reader.read_from(p.r));
  CHECK(reader.error() == "end of stream");
  drain();
  return out;
}

TEST_CASE("control: ControlReader yields the same messages however the bytes arrive") {
  const std::vector<ControlMessage> msgs = every_message();
  std::string stream;
  for (const auto& m : msgs) stream += encode_control(m);

  SUBCASE("byte by byte") {
    const auto got = feed(stream, [] { return std::size_t{1}; });
    REQUIRE(got.size() == msgs.size());
    for (std::size_t i = 0; i < got.size(); ++i) check_same(got[i], msgs[i]);
  }
  SUBCASE("random chunk sizes") {
    std::mt19937 rng(1234);
    for (int round = 0; round < 20; ++round) {
      const auto got = feed(stream, [&] { return std::size_t{1} + rng() % 200; });
      REQUIRE(got.size() == msgs.size());
      for (std::size_t i = 0; i < got.size(); ++i) check_same(got[i], msgs[i]);
    }
  }
  SUBCASE("all at once, several times over, with a large message") {
    ControlMessage big;
    big.type = ControlType::kExited;
    big.exit.seq = 7;
    big.exit.stdout_data.assign(200'000, '\x01');
    big.exit.stdout_size = 200'000;
    std::string s = stream + encode_control(big) + stream;
    const auto got = feed(s, [] { return std::size_t{60'000}; });
    REQUIRE(got.size() == 2 * msgs.size() + 1);
    check_same(got[msgs.size()], big);
    for (std::size_t i = 0; i < msgs.size(); ++i) {
      check_same(got[i], msgs[i]);
      check_same(got[msgs.size() + 1 + i], msgs[i]);
    }
  }
}

TEST_CASE("control: a length prefix over the cap is an error") {
  Pipe p;
  REQUIRE(::fcntl(p.r, F_SETFL, O_NONBLOCK) == 0);
  ControlReader reader(1000);
  REQUIRE(write_all(p.w, "\x00\x00\x03\xe9"s).is_ok());  // 1001
  REQUIRE(reader.read_from(p.r));
  auto item = reader.next();
  REQUIRE(item.has_value());
  REQUIRE_FALSE(item->has_value());
  CHECK(item->error() == "control message of 1001 bytes exceeds the cap");

  ControlReader huge(1 << 20);
  Pipe q;
  REQUIRE(::fcntl(q.r, F_SETFL, O_NONBLOCK) == 0);
  REQUIRE(write_all(q.w, "\xff\xff\xff\xff"s).is_ok());
  REQUIRE(huge.read_from(q.r));
  auto item2 = huge.next();
  REQUIRE(item2.has_value());
  REQUIRE_FALSE(item2->has_value());
  CHECK(item2->error() == "control message of 4294967295 bytes exceeds the cap");
}

TEST_CASE("control: a garbage body is an error and the reader resynchronizes") {
  Pipe p;
  REQUIRE(::fcntl(p.r, F_SETFL, O_NONBLOCK) == 0);
  ControlReader reader(kCap);
  const std::vector<ControlMessage> msgs = every_message();
  const std::string stream = with_prefix("\xc1garbage"s) + encode_control(msgs[4]);
  REQUIRE(write_all(p.w, stream).is_ok());
  REQUIRE(reader.read_from(p.r));
  auto bad = reader.next();
  REQUIRE(bad.has_value());
  REQUIRE_FALSE(bad->has_value());
  CHECK(contains(bad->error(), "malformed control message"));
  auto good = reader.next();
  REQUIRE(good.has_value());
  REQUIRE(good->has_value());
  check_same(good->value(), msgs[4]);
  CHECK_FALSE(reader.next().has_value());

  // An empty body (length 0) is an error too.
  REQUIRE(write_all(p.w, "\0\0\0\0"s).is_ok());
  REQUIRE(reader.read_from(p.r));
  auto empty = reader.next();
  REQUIRE(empty.has_value());
  CHECK_FALSE(empty->has_value());
}

TEST_CASE("control: read_control_blocking") {
  const std::vector<ControlMessage> msgs = every_message();
  SUBCASE("one message") {
    Pipe p;
    REQUIRE(write_all(p.w, encode_control(msgs[3])).is_ok());
    auto m = read_control_blocking(p.r, kCap);
    REQUIRE_MESSAGE(m.has_value(), m.error());
    check_same(*m, msgs[3]);
  }
  SUBCASE("closed before a message") {
    Pipe p;
    p.close_write();
    auto m = read_control_blocking(p.r, kCap);
    REQUIRE_FALSE(m.has_value());
    CHECK(m.error() == "bootstrap pipe closed before a message");
  }
  SUBCASE("truncated") {
    Pipe p;
    const std::string enc = encode_control(msgs[0]);
    REQUIRE(write_all(p.w, enc.substr(0, enc.size() - 3)).is_ok());
    p.close_write();
    auto m = read_control_blocking(p.r, kCap);
    REQUIRE_FALSE(m.has_value());
    CHECK(m.error() == "bootstrap message truncated");
  }
  SUBCASE("too large") {
    Pipe p;
    REQUIRE(write_all(p.w, encode_control(msgs[0])).is_ok());
    auto m = read_control_blocking(p.r, 10);
    REQUIRE_FALSE(m.has_value());
    CHECK(m.error() == "bootstrap message too large");
  }
}

}  // namespace
}  // namespace pillbox
