// The RabbitMQ connection (supervisor/broker/amqp_connection.h) against a
// hostile or broken server: a fake one on a loopback port, written here
// frame by frame (AMQP 0-9-1), that does the handshake and then misbehaves.
// What it says goes into errors cut, on one line, without the password; a
// server that stops in the middle of a message fails the call within the
// connection's timeout instead of hanging the worker.
#include <doctest/doctest.h>

#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <chrono>
#include <cstdint>
#include <functional>
#include <string>
#include <thread>

#include "supervisor/broker/amqp_connection.h"

using pillbox::broker::AmqpConnection;
using namespace std::chrono_literals;

namespace {

constexpr const char* kPassword = "SECRETPW";

std::string be16(std::uint16_t v) { return {static_cast<char>(v >> 8), static_cast<char>(v)}; }
std::string be32(std::uint32_t v) { return be16(static_cast<std::uint16_t>(v >> 16)) + be16(static_cast<std::uint16_t>(v)); }
std::string be64(std::uint64_t v) { return be32(static_cast<std::uint32_t>(v >> 32)) + be32(static_cast<std::uint32_t>(v)); }
std::string shortstr(const std::string& s) { return std::string(1, static_cast<char>(s.size())) + s; }
std::string longstr(const std::string& s) { return be32(static_cast<std::uint32_t>(s.size())) + s; }
std::string frame(char type, std::uint16_t channel, const std::string& payload) {
  return std::string(1, type) + be16(channel) + be32(static_cast<std::uint32_t>(payload.size())) + payload + "\xce";
}
std::string method(std::uint16_t channel, std::uint16_t cls, std::uint16_t id, const std::string& args = "") {
  return frame(1, channel, be16(cls) + be16(id) + args);
}

// One client, served by `script` on its own thread; the socket is closed
// when the fake goes out of scope (which ends a client still waiting).
class FakeBroker {
 public:
  explicit FakeBroker(std::function<void(FakeBroker&)> script) {
    listener_ = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    sockaddr_in a{};
    a.sin_family = AF_INET;
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    REQUIRE(::bind(listener_, reinterpret_cast<sockaddr*>(&a), sizeof a) == 0);
    REQUIRE(::listen(listener_, 1) == 0);
    socklen_t n = sizeof a;
    REQUIRE(::getsockname(listener_, reinterpret_cast<sockaddr*>(&a), &n) == 0);
    port_ = ntohs(a.sin_port);
    thread_ = std::thread([this, script] {
      client_ = ::accept4(listener_, nullptr, nullptr, SOCK_CLOEXEC);
      if (client_ >= 0) script(*this);
    });
  }
  ~FakeBroker() {
    ::shutdown(listener_, SHUT_RDWR);
    if (client_ >= 0) ::shutdown(client_, SHUT_RDWR);
    thread_.join();
    ::close(listener_);
    if (client_ >= 0) ::close(client_);
  }
  std::string url() const { return std::string("amqp://pillbox:") + kPassword + "@127.0.0.1:" + std::to_string(port_) + "/%2f"; }

  void send(const std::string& bytes) { (void)!::write(client_, bytes.data(), bytes.size()); }
  // One frame's payload (type, channel and end byte dropped); "" when the client left.
  std::string read_frame() {
    std::string head = read_exactly(7);
    if (head.size() < 7) return "";
    const std::uint32_t size = (std::uint8_t(head[3]) << 24) | (std::uint8_t(head[4]) << 16) |
                               (std::uint8_t(head[5]) << 8) | std::uint8_t(head[6]);
    return read_exactly(size + 1).substr(0, size);
  }
  // The protocol header read, connection.start sent (the server saying it
  // is `version`), start-ok read.
  void greet(const std::string& version = "3.10.8") {
    read_exactly(8);  // "AMQP\0\0\9\1"
    const std::string properties = shortstr("version") + "S" + longstr(version);
    send(method(0, 10, 10, std::string("\x00\x09", 2) + longstr(properties) + longstr("PLAIN") + longstr("en_US")));
    read_frame();  // start-ok
  }
  // The handshake up to an open channel.
  void handshake(const std::string& version = "3.10.8") {
    greet(version);
    send(method(0, 10, 30, be16(2047) + be32(131072) + be16(0)));  // tune
    read_frame();                                                  // tune-ok
    read_frame();                                                  // open
    send(method(0, 10, 41, shortstr("")));                         // open-ok
    read_frame();                                                  // channel.open
    send(method(1, 20, 11, longstr("")));                          // channel.open-ok
  }
  // Reads until the client leaves.
  void hang() {
    while (!read_frame().empty()) {
    }
  }

 private:
  std::string read_exactly(std::size_t n) {
    std::string out;
    char buf[4096];
    while (out.size() < n) {
      const ssize_t got = ::read(client_, buf, std::min(sizeof buf, n - out.size()));
      if (got <= 0) break;
      out.append(buf, static_cast<std::size_t>(got));
    }
    return out;
  }

  int listener_ = -1;
  int client_ = -1;
  int port_ = 0;
  std::thread thread_;
};

pillbox::Expected<AmqpConnection> open(const FakeBroker& fake) {
  auto address = pillbox::broker::parse_amqp_url(fake.url());
  REQUIRE(address.has_value());
  return AmqpConnection::open(*address, 1500ms);
}

}  // namespace

TEST_CASE("amqp, hostile server: a message whose body never comes fails get() within the timeout, not hangs") {
  FakeBroker fake([](FakeBroker& f) {
    f.handshake();
    f.read_frame();  // basic.get
    // get-ok, then a content header announcing 100 bytes, then nothing.
    f.send(method(1, 60, 71, be64(1) + std::string(1, '\0') + shortstr("") + shortstr("q") + be32(0)));
    f.send(frame(2, 1, be16(60) + be16(0) + be64(100) + be16(0)));
    f.hang();
  });
  auto c = open(fake);
  REQUIRE_MESSAGE(c.has_value(), c.error());
  const auto started = std::chrono::steady_clock::now();
  auto m = c->get("q");
  CHECK(std::chrono::steady_clock::now() - started < 5s);
  REQUIRE_FALSE(m.has_value());
  CHECK(m.error().find("cannot read queue 'q'") != std::string::npos);
  CHECK(c->broken());
}

TEST_CASE("amqp, hostile server: a delivery whose content never comes fails next() within the timeout") {
  FakeBroker fake([](FakeBroker& f) {
    f.handshake();
    f.read_frame();                               // basic.qos
    f.send(method(1, 60, 11));                    // qos-ok
    f.read_frame();                               // basic.consume
    f.send(method(1, 60, 21, shortstr("ctag")));  // consume-ok
    f.send(method(1, 60, 60, shortstr("ctag") + be64(1) + std::string(1, '\0') + shortstr("") + shortstr("q")));
    f.hang();
  });
  auto c = open(fake);
  REQUIRE_MESSAGE(c.has_value(), c.error());
  REQUIRE(c->consume("q", 1).is_ok());
  const auto started = std::chrono::steady_clock::now();
  auto m = c->next(30s);
  CHECK(std::chrono::steady_clock::now() - started < 5s);
  REQUIRE_FALSE(m.has_value());
  CHECK(c->broken());
}

TEST_CASE("amqp, hostile server: what it says is cut to one line and never shows the password") {
  SUBCASE("a refusal that echoes the login back, with a newline") {
    FakeBroker fake([](FakeBroker& f) {
      f.greet();
      f.send(method(0, 10, 50, be16(403) + shortstr(std::string("ACCESS_REFUSED - got pillbox ") + kPassword +
                                                   "\nFAKE LOG LINE") + be16(0) + be16(0)));
      f.hang();
    });
    auto c = open(fake);
    REQUIRE_FALSE(c.has_value());
    CHECK(c.error().find("refused the login") != std::string::npos);
    CHECK(c.error().find(kPassword) == std::string::npos);
    CHECK(c.error().find('\n') == std::string::npos);
  }
  SUBCASE("a version with a newline and the password in it") {
    FakeBroker fake([](FakeBroker& f) {
      f.handshake(std::string("3.10.8\nINJECTED ") + kPassword);
      f.hang();
    });
    auto c = open(fake);
    REQUIRE_MESSAGE(c.has_value(), c.error());
    CHECK(c->server_version().find('\n') == std::string::npos);
    CHECK(c->server_version().find(kPassword) == std::string::npos);
  }
}
