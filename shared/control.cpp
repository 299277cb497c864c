#include "shared/control.h"

#include <poll.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <msgpack.hpp>
#include <stdexcept>

namespace pillbox {
namespace {

using Packer = msgpack::packer<msgpack::sbuffer>;

// --- encoding helpers: every struct is a fixed-length array, in field order.

void pack_str(Packer& pk, std::string_view s) {
  pk.pack_str(static_cast<std::uint32_t>(s.size()));
  pk.pack_str_body(s.data(), s.size());
}
void pack_bin(Packer& pk, std::string_view s) {
  pk.pack_bin(static_cast<std::uint32_t>(s.size()));
  pk.pack_bin_body(s.data(), s.size());
}
void pack_strings(Packer& pk, const std::vector<std::string>& v) {
  pk.pack_array(static_cast<std::uint32_t>(v.size()));
  for (const auto& s : v) pack_str(pk, s);
}

void pack_policy(Packer& pk, const Policy& p) {
  pk.pack_array(21);
  pack_str(pk, p.name);
  pack_str(pk, p.origin);
  pk.pack_uint64(p.limits.cpu_ms);
  pk.pack_uint64(p.limits.wall_ms);
  pk.pack_uint64(p.limits.memory_bytes);
  pk.pack_uint64(p.limits.file_size_bytes);
  pk.pack_uint64(p.limits.open_files);
  pk.pack_uint64(p.limits.processes);
  pk.pack_uint64(p.limits.stack_bytes);
  pk.pack_uint64(p.limits.output_bytes);
  pk.pack(p.isolation.network);
  pack_str(pk, p.isolation.user);
  pk.pack_uint8(static_cast<std::uint8_t>(p.isolation.cgroup));
  pk.pack_uint8(static_cast<std::uint8_t>(p.isolation.filesystem));
  pk.pack(p.seccomp.enabled);
  pk.pack_uint8(static_cast<std::uint8_t>(p.seccomp.default_action));
  pack_strings(pk, p.seccomp.allow);
  pk.pack_array(2);
  pk.pack_uint32(p.isolation.uid_pool_first);
  pk.pack_uint32(p.isolation.uid_pool_size);
  pk.pack_uint64(p.isolation.tmp_bytes);
  pack_strings(pk, p.isolation.writable);
  pack_strings(pk, p.isolation.shared);
}

void pack_config(Packer& pk, const ChildConfig& c) {
  pk.pack_array(13);
  pack_str(pk, c.handler);
  pk.pack_map(static_cast<std::uint32_t>(c.args.size()));
  for (const auto& [k, v] : c.args) {
    pack_str(pk, k);
    pack_str(pk, v);
  }
  pack_policy(pk, c.policy);
  pack_strings(pk, c.exec_argv);
  pk.pack(c.exec_payload_as_file);
  pack_str(pk, c.crash_lib);
  pk.pack(c.drop_privileges);
  pk.pack_uint32(c.sandbox_uid);
  pk.pack_uint32(c.sandbox_gid);
  pk.pack(c.use_namespaces);
  pk.pack_uint32(c.check_uid);
  pack_strings(pk, c.keep_visible);
  pack_str(pk, c.working_dir);
}

void pack_ticket(Packer& pk, const TaskTicket& t) {
  pk.pack_array(8);
  pk.pack_uint64(t.seq);
  pack_str(pk, t.endpoint);
  pack_bin(pk, std::string_view(reinterpret_cast<const char*>(t.secret.data()), t.secret.size()));
  pack_strings(pk, t.cgroup_procs);
  pk.pack_uint32(t.uid);
  pk.pack_uint32(t.gid);
  pk.pack_uint32(t.slot);
  pack_str(pk, t.key);
}

void pack_exit(Packer& pk, const ExitReport& e) {
  pk.pack_array(16);
  pk.pack_uint64(e.seq);
  pk.pack_int64(e.pid);
  pk.pack_int32(e.wait_status);
  pk.pack_uint64(e.utime_us);
  pk.pack_uint64(e.stime_us);
  pk.pack_uint64(e.max_rss_kb);
  pack_bin(pk, e.crash);
  pack_bin(pk, e.stdout_data);
  pk.pack_uint64(e.stdout_size);
  pack_bin(pk, e.stderr_tail);
  pk.pack(e.seccomp_watched);
  pk.pack_int32(e.violation_nr);
  pk.pack_uint32(e.violation_arch);
  pk.pack(e.slot_renewed);
  pk.pack_int32(e.payload_read);
  pk.pack_uint64(e.payload_file_size);
}

// --- decoding helpers: throw std::runtime_error on any shape mismatch.

const msgpack::object_array& arr(const msgpack::object& o, std::uint32_t n, const char* what) {
  if (o.type != msgpack::type::ARRAY || o.via.array.size != n) {
    throw std::runtime_error(std::string(what) + ": expected an array of " + std::to_string(n));
  }
  return o.via.array;
}
std::string str(const msgpack::object& o) {
  if (o.type == msgpack::type::STR) return std::string(o.via.str.ptr, o.via.str.size);
  if (o.type == msgpack::type::BIN) return std::string(o.via.bin.ptr, o.via.bin.size);
  throw std::runtime_error("expected a string");
}
std::uint64_t u64(const msgpack::object& o) {
  if (o.type != msgpack::type::POSITIVE_INTEGER) throw std::runtime_error("expected an unsigned integer");
  return o.via.u64;
}
std::int64_t i64(const msgpack::object& o) {
  if (o.type == msgpack::type::POSITIVE_INTEGER) return static_cast<std::int64_t>(o.via.u64);
  if (o.type == msgpack::type::NEGATIVE_INTEGER) return o.via.i64;
  throw std::runtime_error("expected an integer");
}
bool boolean(const msgpack::object& o) {
  if (o.type != msgpack::type::BOOLEAN) throw std::runtime_error("expected a boolean");
  return o.via.boolean;
}
std::vector<std::string> strings(const msgpack::object& o) {
  if (o.type != msgpack::type::ARRAY) throw std::runtime_error("expected an array of strings");
  std::vector<std::string> v;
  for (std::uint32_t i = 0; i < o.via.array.size; ++i) v.push_back(str(o.via.array.ptr[i]));
  return v;
}
template <class E>
E enum_u8(const msgpack::object& o, std::uint8_t min, std::uint8_t max) {
  const std::uint64_t v = u64(o);
  if (v < min || v > max) throw std::runtime_error("enum value out of range");
  return static_cast<E>(v);
}

Policy unpack_policy(const msgpack::object& o) {
  const auto& a = arr(o, 21, "policy");
  Policy p;
  p.name = str(a.ptr[0]);
  p.origin = str(a.ptr[1]);
  p.limits.cpu_ms = u64(a.ptr[2]);
  p.limits.wall_ms = u64(a.ptr[3]);
  p.limits.memory_bytes = u64(a.ptr[4]);
  p.limits.file_size_bytes = u64(a.ptr[5]);
  p.limits.open_files = u64(a.ptr[6]);
  p.limits.processes = u64(a.ptr[7]);
  p.limits.stack_bytes = u64(a.ptr[8]);
  p.limits.output_bytes = u64(a.ptr[9]);
  p.isolation.network = boolean(a.ptr[10]);
  p.isolation.user = str(a.ptr[11]);
  p.isolation.cgroup = enum_u8<CgroupMode>(a.ptr[12], 0, 2);
  p.isolation.filesystem = enum_u8<FilesystemMode>(a.ptr[13], 0, 1);
  p.seccomp.enabled = boolean(a.ptr[14]);
  p.seccomp.default_action = enum_u8<SeccompDefault>(a.ptr[15], 0, 2);
  p.seccomp.allow = strings(a.ptr[16]);
  const auto& pool = arr(a.ptr[17], 2, "uid pool");
  p.isolation.uid_pool_first = static_cast<std::uint32_t>(u64(pool.ptr[0]));
  p.isolation.uid_pool_size = static_cast<std::uint32_t>(u64(pool.ptr[1]));
  p.isolation.tmp_bytes = u64(a.ptr[18]);
  p.isolation.writable = strings(a.ptr[19]);
  p.isolation.shared = strings(a.ptr[20]);
  return p;
}

ChildConfig unpack_config(const msgpack::object& o) {
  const auto& a = arr(o, 13, "config");
  ChildConfig c;
  c.handler = str(a.ptr[0]);
  if (a.ptr[1].type != msgpack::type::MAP) throw std::runtime_error("args: expected a map");
  for (std::uint32_t i = 0; i < a.ptr[1].via.map.size; ++i) {
    const auto& kv = a.ptr[1].via.map.ptr[i];
    c.args[str(kv.key)] = str(kv.val);
  }
  c.policy = unpack_policy(a.ptr[2]);
  c.exec_argv = strings(a.ptr[3]);
  c.exec_payload_as_file = boolean(a.ptr[4]);
  c.crash_lib = str(a.ptr[5]);
  c.drop_privileges = boolean(a.ptr[6]);
  c.sandbox_uid = static_cast<std::uint32_t>(u64(a.ptr[7]));
  c.sandbox_gid = static_cast<std::uint32_t>(u64(a.ptr[8]));
  c.use_namespaces = boolean(a.ptr[9]);
  c.check_uid = static_cast<std::uint32_t>(u64(a.ptr[10]));
  c.keep_visible = strings(a.ptr[11]);
  c.working_dir = str(a.ptr[12]);
  return c;
}

TaskTicket unpack_ticket(const msgpack::object& o) {
  const auto& a = arr(o, 8, "ticket");
  TaskTicket t;
  t.seq = u64(a.ptr[0]);
  t.endpoint = str(a.ptr[1]);
  const std::string secret = str(a.ptr[2]);
  if (secret.size() != kSecretSize) throw std::runtime_error("ticket secret has the wrong size");
  std::memcpy(t.secret.data(), secret.data(), kSecretSize);
  t.cgroup_procs = strings(a.ptr[3]);
  t.uid = static_cast<std::uint32_t>(u64(a.ptr[4]));
  t.gid = static_cast<std::uint32_t>(u64(a.ptr[5]));
  t.slot = static_cast<std::uint32_t>(u64(a.ptr[6]));
  t.key = str(a.ptr[7]);
  return t;
}

ExitReport unpack_exit(const msgpack::object& o) {
  const auto& a = arr(o, 16, "exit report");
  ExitReport e;
  e.seq = u64(a.ptr[0]);
  e.pid = i64(a.ptr[1]);
  e.wait_status = static_cast<std::int32_t>(i64(a.ptr[2]));
  e.utime_us = u64(a.ptr[3]);
  e.stime_us = u64(a.ptr[4]);
  e.max_rss_kb = u64(a.ptr[5]);
  e.crash = str(a.ptr[6]);
  e.stdout_data = str(a.ptr[7]);
  e.stdout_size = u64(a.ptr[8]);
  e.stderr_tail = str(a.ptr[9]);
  e.seccomp_watched = boolean(a.ptr[10]);
  e.violation_nr = static_cast<std::int32_t>(i64(a.ptr[11]));
  e.violation_arch = static_cast<std::uint32_t>(u64(a.ptr[12]));
  e.slot_renewed = boolean(a.ptr[13]);
  e.payload_read = static_cast<std::int32_t>(i64(a.ptr[14]));
  e.payload_file_size = u64(a.ptr[15]);
  return e;
}

}  // namespace

std::string encode_control(const ControlMessage& m) {
  msgpack::sbuffer buf(256 + m.exit.stdout_data.size() + m.exit.crash.size());
  const char zero[4] = {0, 0, 0, 0};
  buf.write(zero, 4);  // length prefix, filled in below
  Packer pk(buf);
  pk.pack_array(3);
  pk.pack_uint32(kControlVersion);
  pk.pack_uint8(static_cast<std::uint8_t>(m.type));
  switch (m.type) {
    case ControlType::kConfig: pack_config(pk, m.config); break;
    case ControlType::kReady:
      pk.pack_array(3);
      pk.pack_int64(m.ready.pid);
      pack_strings(pk, m.ready.isolation);
      pack_strings(pk, m.ready.warnings);
      break;
    case ControlType::kFailed:
      pk.pack_array(2);
      pack_str(pk, m.message);
      pk.pack_uint8(static_cast<std::uint8_t>(m.error_code));
      break;
    case ControlType::kFork: pack_ticket(pk, m.ticket); break;
    case ControlType::kForked:
      pk.pack_array(2);
      pk.pack_uint64(m.seq);
      pk.pack_int64(m.pid);
      break;
    case ControlType::kForkFailed:
      pk.pack_array(2);
      pk.pack_uint64(m.seq);
      pack_str(pk, m.message);
      break;
    case ControlType::kExited: pack_exit(pk, m.exit); break;
    case ControlType::kKill: pk.pack_int64(m.pid); break;
  }
  std::string out(buf.data(), buf.size());
  const std::uint32_t len = static_cast<std::uint32_t>(out.size() - 4);
  out[0] = static_cast<char>(len >> 24);
  out[1] = static_cast<char>(len >> 16);
  out[2] = static_cast<char>(len >> 8);
  out[3] = static_cast<char>(len);
  return out;
}

Expected<ControlMessage> decode_control(std::string_view body, std::size_t max_bytes) {
  if (body.size() > max_bytes) return Error{"control message exceeds " + std::to_string(max_bytes) + " bytes"};
  try {
    const msgpack::unpack_limit limit(1 << 16, 1 << 12, max_bytes, max_bytes, 0, 8);
    std::size_t off = 0;
    msgpack::object_handle oh = msgpack::unpack(body.data(), body.size(), off, nullptr, nullptr, limit);
    if (off != body.size()) return Error{"trailing bytes after control message"};
    const auto& a = arr(oh.get(), 3, "control message");
    if (u64(a.ptr[0]) != kControlVersion) return Error{"control protocol version mismatch"};
    ControlMessage m;
    m.type = enum_u8<ControlType>(a.ptr[1], 1, 8);
    const msgpack::object& b = a.ptr[2];
    switch (m.type) {
      case ControlType::kConfig: m.config = unpack_config(b); break;
      case ControlType::kReady: {
        const auto& r = arr(b, 3, "ready");
        m.ready.pid = i64(r.ptr[0]);
        m.ready.isolation = strings(r.ptr[1]);
        m.ready.warnings = strings(r.ptr[2]);
        break;
      }
      case ControlType::kFailed: {
        const auto& r = arr(b, 2, "failed");
        m.message = str(r.ptr[0]);
        m.error_code = enum_u8<ErrorCode>(r.ptr[1], 0, static_cast<std::uint8_t>(ErrorCode::kConfig));
        break;
      }
      case ControlType::kFork: m.ticket = unpack_ticket(b); break;
      case ControlType::kForked: {
        const auto& r = arr(b, 2, "forked");
        m.seq = u64(r.ptr[0]);
        m.pid = i64(r.ptr[1]);
        break;
      }
      case ControlType::kForkFailed: {
        const auto& r = arr(b, 2, "fork failed");
        m.seq = u64(r.ptr[0]);
        m.message = str(r.ptr[1]);
        break;
      }
      case ControlType::kExited: m.exit = unpack_exit(b); break;
      case ControlType::kKill: m.pid = i64(b); break;
    }
    if (m.type == ControlType::kConfig && m.config.handler.empty()) return Error{"config without a handler"};
    return m;
  } catch (const std::exception& e) {
    return Error{std::string("malformed control message: ") + e.what()};
  }
}

bool ControlReader::read_from(int fd) {
  char chunk[65536];
  for (;;) {
    const ssize_t n = ::read(fd, chunk, sizeof chunk);
    if (n > 0) {
      buf_.append(chunk, static_cast<std::size_t>(n));
      if (static_cast<std::size_t>(n) < sizeof chunk) return true;
      continue;
    }
    if (n == 0) {
      error_ = "end of stream";
      return false;
    }
    if (errno == EINTR) continue;
    if (errno == EAGAIN || errno == EWOULDBLOCK) return true;
    error_ = std::string("read: ") + std::strerror(errno);
    return false;
  }
}

std::optional<Expected<ControlMessage>> ControlReader::next() {
  const std::size_t avail = buf_.size() - pos_;
  if (avail < 4) return std::nullopt;
  const auto* p = reinterpret_cast<const unsigned char*>(buf_.data() + pos_);
  const std::uint32_t len = (std::uint32_t{p[0]} << 24) | (std::uint32_t{p[1]} << 16) |
                            (std::uint32_t{p[2]} << 8) | std::uint32_t{p[3]};
  if (len > max_) return Expected<ControlMessage>(Error{"control message of " + std::to_string(len) + " bytes exceeds the cap"});
  if (avail < 4 + std::size_t{len}) return std::nullopt;
  auto msg = decode_control(std::string_view(buf_).substr(pos_ + 4, len), max_);
  pos_ += 4 + len;
  if (pos_ == buf_.size()) {
    buf_.clear();
    pos_ = 0;
  } else if (pos_ > (1u << 20)) {
    buf_.erase(0, pos_);
    pos_ = 0;
  }
  return msg;
}

Status write_all(int fd, std::string_view bytes) {
  while (!bytes.empty()) {
    const ssize_t n = ::write(fd, bytes.data(), bytes.size());
    if (n < 0) {
      if (errno == EINTR) continue;
      if (errno == EAGAIN) {
        pollfd p{fd, POLLOUT, 0};
        ::poll(&p, 1, -1);
        continue;
      }
      return Status::error(std::string("write: ") + std::strerror(errno));
    }
    bytes.remove_prefix(static_cast<std::size_t>(n));
  }
  return Status::ok();
}

Expected<ControlMessage> read_control_blocking(int fd, std::size_t max_bytes) {
  auto read_exact = [fd](char* dst, std::size_t n) -> bool {
    while (n > 0) {
      const ssize_t r = ::read(fd, dst, n);
      if (r < 0 && errno == EINTR) continue;
      if (r <= 0) return false;
      dst += r;
      n -= static_cast<std::size_t>(r);
    }
    return true;
  };
  unsigned char hdr[4];
  if (!read_exact(reinterpret_cast<char*>(hdr), 4)) return Error{"bootstrap pipe closed before a message"};
  const std::uint32_t len = (std::uint32_t{hdr[0]} << 24) | (std::uint32_t{hdr[1]} << 16) |
                            (std::uint32_t{hdr[2]} << 8) | std::uint32_t{hdr[3]};
  if (len > max_bytes) return Error{"bootstrap message too large"};
  std::string body(len, '\0');
  if (!read_exact(body.data(), len)) return Error{"bootstrap message truncated"};
  return decode_control(body, max_bytes);
}

}  // namespace pillbox
