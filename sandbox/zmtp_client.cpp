#include "sandbox/zmtp_client.h"

#include <poll.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <time.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

namespace pillbox::sandbox {
namespace {

// ZMTP 3.0 (https://rfc.zeromq.org/spec/23/), NULL security mechanism.
constexpr unsigned char kFlagMore = 0x01;
constexpr unsigned char kFlagLong = 0x02;
constexpr unsigned char kFlagCommand = 0x04;
constexpr std::size_t kGreetingSize = 64;
constexpr std::size_t kMaxCommandBytes = 4096;

long long now_ns() {
  timespec ts{};
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return static_cast<long long>(ts.tv_sec) * 1'000'000'000 + ts.tv_nsec;
}

long long deadline_after(int timeout_ms) { return now_ns() + static_cast<long long>(timeout_ms) * 1'000'000; }

// Waits for `events` until the deadline; false on timeout or error.
bool wait_for(int fd, short events, long long deadline_ns) {
  for (;;) {
    const long long left_ns = deadline_ns - now_ns();
    if (left_ns <= 0) return false;
    pollfd p{fd, events, 0};
    const int rc = ::poll(&p, 1, static_cast<int>(std::min<long long>(left_ns / 1'000'000 + 1, 1 << 30)));
    if (rc > 0) return true;
    if (rc < 0 && errno != EINTR) return false;
  }
}

void put_u32(std::string& out, std::uint32_t v) {
  for (int shift = 24; shift >= 0; shift -= 8) out += static_cast<char>((v >> shift) & 0xff);
}

void put_frame_header(std::string& out, unsigned char flags, std::size_t size) {
  if (size > 255) {
    out += static_cast<char>(flags | kFlagLong);
    for (int shift = 56; shift >= 0; shift -= 8) out += static_cast<char>((static_cast<std::uint64_t>(size) >> shift) & 0xff);
  } else {
    out += static_cast<char>(flags);
    out += static_cast<char>(size);
  }
}

// Parses "READY" (or "ERROR") command bodies; returns the Socket-Type property.
Expected<std::string> parse_ready(std::string_view body) {
  if (body.empty()) return Error{"empty ZMTP command"};
  const std::size_t name_len = static_cast<unsigned char>(body[0]);
  if (1 + name_len > body.size()) return Error{"truncated ZMTP command name"};
  const std::string_view name = body.substr(1, name_len);
  if (name == "ERROR") return Error{"the supervisor refused the ZMTP handshake"};
  if (name != "READY") return Error{"expected a ZMTP READY command, got '" + std::string(name) + "'"};
  std::size_t pos = 1 + name_len;
  std::string socket_type;
  while (pos < body.size()) {
    const std::size_t key_len = static_cast<unsigned char>(body[pos++]);
    if (pos + key_len + 4 > body.size()) return Error{"truncated ZMTP property"};
    const std::string_view key = body.substr(pos, key_len);
    pos += key_len;
    std::uint32_t value_len = 0;
    for (int i = 0; i < 4; ++i) value_len = (value_len << 8) | static_cast<unsigned char>(body[pos++]);
    if (value_len > body.size() - pos) return Error{"truncated ZMTP property value"};
    if (key == "Socket-Type") socket_type = std::string(body.substr(pos, value_len));
    pos += value_len;
  }
  return socket_type;
}

}  // namespace

std::string zmtp_greeting() {
  std::string g(kGreetingSize, '\0');
  g[0] = static_cast<char>(0xff);
  g[8] = 1;  // padding: libzmq writes (identity size + 1) here for ZMTP 1.0 peers
  g[9] = 0x7f;
  g[10] = 3;  // version 3.1
  g[11] = 1;
  std::memcpy(&g[12], "NULL", 4);  // mechanism, zero-padded to 20 bytes
  g[32] = 0;                       // as-server: no
  return g;
}

std::string zmtp_ready_command(std::string_view socket_type) {
  std::string body;
  body += static_cast<char>(5);
  body += "READY";
  const std::string_view key = "Socket-Type";
  body += static_cast<char>(key.size());
  body += key;
  put_u32(body, static_cast<std::uint32_t>(socket_type.size()));
  body += socket_type;
  std::string frame;
  put_frame_header(frame, kFlagCommand, body.size());
  return frame + body;
}

std::string zmtp_message_frame(std::string_view body) {
  std::string frame;
  frame.reserve(body.size() + 9);
  put_frame_header(frame, 0, body.size());
  frame += body;
  return frame;
}

Expected<ZmtpClient> ZmtpClient::connect(const std::string& endpoint) {
  const std::string prefix = "ipc://";
  if (endpoint.compare(0, prefix.size(), prefix) != 0) return Error{"not an ipc:// endpoint: " + endpoint};
  const std::string path = endpoint.substr(prefix.size());
  sockaddr_un addr{};
  if (path.size() >= sizeof addr.sun_path) return Error{"endpoint path too long: " + path};
  addr.sun_family = AF_UNIX;
  std::memcpy(addr.sun_path, path.c_str(), path.size() + 1);
  UniqueFd fd(::socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0));
  if (!fd.valid()) return Error{std::string("socket: ") + std::strerror(errno)};
  if (::connect(fd.get(), reinterpret_cast<const sockaddr*>(&addr), sizeof addr) != 0) {
    return Error{"connect " + path + ": " + std::strerror(errno)};
  }
  return ZmtpClient(std::move(fd));
}

Status ZmtpClient::write_all(std::string_view bytes, long long deadline_ns) {
  while (!bytes.empty()) {
    const ssize_t n = ::send(fd_.get(), bytes.data(), bytes.size(), MSG_NOSIGNAL | MSG_DONTWAIT);
    if (n > 0) {
      bytes.remove_prefix(static_cast<std::size_t>(n));
      continue;
    }
    if (n < 0 && errno == EINTR) continue;
    if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) {
      if (!wait_for(fd_.get(), POLLOUT, deadline_ns)) return Status::error("timed out writing to the supervisor");
      continue;
    }
    return Status::error(std::string("write to the supervisor: ") + std::strerror(errno));
  }
  return Status::ok();
}

Status ZmtpClient::read_exact(char* out, std::size_t n, long long deadline_ns) {
  while (n > 0) {
    const ssize_t r = ::recv(fd_.get(), out, n, MSG_DONTWAIT);
    if (r > 0) {
      out += r;
      n -= static_cast<std::size_t>(r);
      continue;
    }
    if (r == 0) return Status::error("the supervisor closed the connection");
    if (errno == EINTR) continue;
    if (errno == EAGAIN || errno == EWOULDBLOCK) {
      if (!wait_for(fd_.get(), POLLIN, deadline_ns)) return Status::error("timed out waiting for the supervisor");
      continue;
    }
    return Status::error(std::string("read from the supervisor: ") + std::strerror(errno));
  }
  return Status::ok();
}

Status ZmtpClient::read_handshake(long long deadline_ns) {
  char greeting[kGreetingSize];
  if (auto s = read_exact(greeting, sizeof greeting, deadline_ns); !s) return s;
  if (static_cast<unsigned char>(greeting[0]) != 0xff || (greeting[9] & 1) != 1 || greeting[10] < 3) {
    return Status::error("the peer does not speak ZMTP 3");
  }
  if (std::memcmp(&greeting[12], "NULL", 5) != 0) return Status::error("the peer wants a ZMTP security mechanism other than NULL");
  unsigned char header[2];
  if (auto s = read_exact(reinterpret_cast<char*>(header), 2, deadline_ns); !s) return s;
  if (!(header[0] & kFlagCommand) || (header[0] & kFlagLong)) return Status::error("expected a short ZMTP command");
  std::string body(header[1], '\0');
  if (auto s = read_exact(body.data(), body.size(), deadline_ns); !s) return s;
  auto type = parse_ready(body);
  if (!type) return Status::error(type.error());
  if (*type != "ROUTER") return Status::error("the supervisor's socket is " + *type + ", not ROUTER");
  read_handshake_ = true;
  return Status::ok();
}

Status ZmtpClient::start_handshake(int timeout_ms) {
  if (sent_handshake_) return Status::ok();
  sent_handshake_ = true;
  return write_all(zmtp_greeting() + zmtp_ready_command("DEALER"), deadline_after(timeout_ms));
}

Status ZmtpClient::send(std::string_view message, int timeout_ms) {
  const long long deadline = deadline_after(timeout_ms);
  if (!sent_handshake_) {
    if (auto s = start_handshake(timeout_ms); !s) return s;
  }
  if (!read_handshake_) {
    if (auto s = read_handshake(deadline); !s) return s;
  }
  return write_all(zmtp_message_frame(message), deadline);
}

Expected<std::string> ZmtpClient::receive(int timeout_ms, std::size_t max_bytes) {
  const long long deadline = deadline_after(timeout_ms);
  if (!read_handshake_) {
    if (auto s = read_handshake(deadline); !s) return Error{s.message()};
  }
  for (;;) {
    unsigned char flags = 0;
    if (auto s = read_exact(reinterpret_cast<char*>(&flags), 1, deadline); !s) return Error{s.message()};
    std::uint64_t size = 0;
    if (flags & kFlagLong) {
      unsigned char b[8];
      if (auto s = read_exact(reinterpret_cast<char*>(b), 8, deadline); !s) return Error{s.message()};
      for (unsigned char c : b) size = (size << 8) | c;
    } else {
      unsigned char b;
      if (auto s = read_exact(reinterpret_cast<char*>(&b), 1, deadline); !s) return Error{s.message()};
      size = b;
    }
    if (flags & kFlagCommand) {
      if (size > kMaxCommandBytes) return Error{"oversized ZMTP command"};
      std::string body(static_cast<std::size_t>(size), '\0');
      if (auto s = read_exact(body.data(), body.size(), deadline); !s) return Error{s.message()};
      if (body.size() >= 5 && body.compare(0, 5, "\x04PING") == 0) {
        // Heartbeat: answer PONG with the context the PING carried (after its 2-byte TTL).
        std::string pong_body = "\x04PONG" + (body.size() > 7 ? body.substr(7) : std::string());
        std::string frame;
        put_frame_header(frame, kFlagCommand, pong_body.size());
        if (auto s = write_all(frame + pong_body, deadline); !s) return Error{s.message()};
      }
      continue;  // other commands carry nothing for us
    }
    if (flags & kFlagMore) return Error{"unexpected multipart message from the supervisor"};
    if (size > max_bytes) return Error{"message of " + std::to_string(size) + " bytes exceeds the cap"};
    std::string body(static_cast<std::size_t>(size), '\0');
    if (auto s = read_exact(body.data(), body.size(), deadline); !s) return Error{s.message()};
    return body;
  }
}

}  // namespace pillbox::sandbox
