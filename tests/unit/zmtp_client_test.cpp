#include "sandbox/zmtp_client.h"

#include <doctest/doctest.h>

#include <chrono>
#include <cstdlib>
#include <random>
#include <string>
#include <vector>
#include <zmq.hpp>
#include <zmq_addon.hpp>

#include "tests/unit/scratch_dir.h"

namespace pillbox::sandbox {
namespace {

using namespace std::string_literals;

constexpr int kTimeoutMs = 10'000;  // generous: only reached when something is broken

bool contains(const std::string& haystack, std::string_view needle) {
  return haystack.find(needle) != std::string::npos;
}

// A supervisor-side libzmq socket bound to ipc://TMP/s.
struct Peer {
  test::ScratchDir dir{"zmtp"};
  zmq::context_t ctx{1};
  zmq::socket_t socket;
  std::string endpoint;

  explicit Peer(zmq::socket_type type = zmq::socket_type::router) : socket(ctx, type) {
    socket.set(zmq::sockopt::linger, 0);
    endpoint = "ipc://" + dir.path + "/s";
    socket.bind(endpoint);
  }

  // Waits (bounded) for one multipart message.
  std::vector<std::string> receive() {
    zmq::pollitem_t item{static_cast<void*>(socket), 0, ZMQ_POLLIN, 0};
    const int n = zmq::poll(&item, 1, std::chrono::milliseconds(kTimeoutMs));
    REQUIRE_MESSAGE(n == 1, "the peer received nothing within the timeout");
    std::vector<zmq::message_t> parts;
    const auto got = zmq::recv_multipart(socket, std::back_inserter(parts), zmq::recv_flags::dontwait);
    REQUIRE(got.has_value());
    std::vector<std::string> out;
    for (auto& p : parts) out.push_back(p.to_string());
    return out;
  }

  void send(const std::vector<std::string>& parts) {
    std::vector<zmq::const_buffer> bufs;
    for (const auto& p : parts) bufs.push_back(zmq::buffer(p));
    const auto sent = zmq::send_multipart(socket, bufs);
    REQUIRE(sent.has_value());
    REQUIRE(*sent == parts.size());
  }
};

ZmtpClient connect_to(const std::string& endpoint) {
  auto client = ZmtpClient::connect(endpoint);
  REQUIRE_MESSAGE(client.has_value(), client.error());
  return std::move(client.value());
}

std::string random_bytes(std::size_t n, unsigned seed) {
  std::mt19937 rng(seed);
  std::string s(n, '\0');
  for (auto& c : s) c = static_cast<char>(rng());
  return s;
}

TEST_CASE("zmtp: greeting, READY and message frame encodings") {
  const std::string g = zmtp_greeting();
  REQUIRE(g.size() == 64);
  CHECK(static_cast<unsigned char>(g[0]) == 0xff);
  CHECK(g[9] == 0x7f);
  CHECK(g[10] == 3);
  CHECK(g.substr(12, 20) == "NULL"s + std::string(16, '\0'));
  CHECK(g[32] == 0);

  CHECK(zmtp_ready_command("DEALER") == "\x04\x1c\x05READY\x0bSocket-Type\x00\x00\x00\x06" "DEALER"s);
  CHECK(zmtp_message_frame("abc") == "\x00\x03" "abc"s);
  CHECK(zmtp_message_frame("") == "\x00\x00"s);
  const std::string long_frame = zmtp_message_frame(std::string(256, 'x'));
  CHECK(long_frame.substr(0, 9) == "\x02\x00\x00\x00\x00\x00\x00\x01\x00"s);
  CHECK(long_frame.size() == 9 + 256);
  CHECK(zmtp_message_frame(std::string(255, 'x')).substr(0, 2) == "\x00\xff"s);
}

TEST_CASE("zmtp: a message from the client reaches a libzmq ROUTER byte for byte") {
  Peer router;
  ZmtpClient client = connect_to(router.endpoint);
  REQUIRE(client.fd() >= 0);
  REQUIRE(client.start_handshake(kTimeoutMs).is_ok());
  const std::string body = "hello\0world\xff"s;
  const Status sent = client.send(body, kTimeoutMs);
  REQUIRE_MESSAGE(sent.is_ok(), sent.message());
  const auto parts = router.receive();
  REQUIRE(parts.size() == 2);
  CHECK_FALSE(parts[0].empty());  // the routing id libzmq assigned
  CHECK(parts[1] == body);

  // A second message on the same connection, and an empty one.
  REQUIRE(client.send("second", kTimeoutMs).is_ok());
  REQUIRE(client.send("", kTimeoutMs).is_ok());
  const auto second = router.receive();
  REQUIRE(second.size() == 2);
  CHECK(second[0] == parts[0]);
  CHECK(second[1] == "second");
  const auto empty = router.receive();
  REQUIRE(empty.size() == 2);
  CHECK(empty[1].empty());
}

TEST_CASE("zmtp: send performs the handshake itself when start_handshake was not called") {
  Peer router;
  ZmtpClient client = connect_to(router.endpoint);
  REQUIRE(client.send("no explicit handshake", kTimeoutMs).is_ok());
  const auto parts = router.receive();
  REQUIRE(parts.size() == 2);
  CHECK(parts[1] == "no explicit handshake");
}

TEST_CASE("zmtp: the ROUTER's reply comes back from receive()") {
  Peer router;
  ZmtpClient client = connect_to(router.endpoint);
  REQUIRE(client.start_handshake(kTimeoutMs).is_ok());
  REQUIRE(client.send("HELLO", kTimeoutMs).is_ok());
  const auto parts = router.receive();
  REQUIRE(parts.size() == 2);
  const std::string reply = "TASK\0payload\x80"s;
  router.send({parts[0], reply});
  auto got = client.receive(kTimeoutMs, 1024);
  REQUIRE_MESSAGE(got.has_value(), got.error());
  CHECK(*got == reply);

  router.send({parts[0], ""});
  auto empty = client.receive(kTimeoutMs, 1024);
  REQUIRE(empty.has_value());
  CHECK(empty->empty());

  // Exactly max_bytes is accepted.
  router.send({parts[0], std::string(1024, 'z')});
  auto exact = client.receive(kTimeoutMs, 1024);
  REQUIRE_MESSAGE(exact.has_value(), exact.error());
  CHECK(*exact == std::string(1024, 'z'));
}

TEST_CASE("zmtp: 1 MiB messages both ways (long frames)") {
  Peer router;
  ZmtpClient client = connect_to(router.endpoint);
  REQUIRE(client.start_handshake(kTimeoutMs).is_ok());
  const std::string up = random_bytes(1 << 20, 1);
  const Status sent = client.send(up, kTimeoutMs);
  REQUIRE_MESSAGE(sent.is_ok(), sent.message());
  const auto parts = router.receive();
  REQUIRE(parts.size() == 2);
  CHECK(parts[1].size() == up.size());
  CHECK(parts[1] == up);

  const std::string down = random_bytes(1 << 20, 2);
  router.send({parts[0], down});
  auto got = client.receive(kTimeoutMs, 1 << 20);
  REQUIRE_MESSAGE(got.has_value(), got.error());
  CHECK(got->size() == down.size());
  CHECK(*got == down);
}

TEST_CASE("zmtp: a message larger than max_bytes is an error") {
  Peer router;
  ZmtpClient client = connect_to(router.endpoint);
  REQUIRE(client.send("HELLO", kTimeoutMs).is_ok());
  const auto parts = router.receive();
  REQUIRE(parts.size() == 2);
  router.send({parts[0], std::string(1025, 'x')});
  auto got = client.receive(kTimeoutMs, 1024);
  REQUIRE_FALSE(got.has_value());
  CHECK(got.error() == "message of 1025 bytes exceeds the cap");
}

TEST_CASE("zmtp: a multipart message from the supervisor is an error") {
  Peer router;
  ZmtpClient client = connect_to(router.endpoint);
  REQUIRE(client.send("HELLO", kTimeoutMs).is_ok());
  const auto parts = router.receive();
  REQUIRE(parts.size() == 2);
  router.send({parts[0], "one", "two"});
  auto got = client.receive(kTimeoutMs, 1024);
  REQUIRE_FALSE(got.has_value());
  CHECK(got.error() == "unexpected multipart message from the supervisor");
}

TEST_CASE("zmtp: receive times out when the peer sends nothing") {
  Peer router;
  ZmtpClient client = connect_to(router.endpoint);
  REQUIRE(client.send("HELLO", kTimeoutMs).is_ok());
  REQUIRE(router.receive().size() == 2);
  const auto start = std::chrono::steady_clock::now();
  auto got = client.receive(50, 1024);
  const auto elapsed = std::chrono::steady_clock::now() - start;
  REQUIRE_FALSE(got.has_value());
  CHECK(got.error() == "timed out waiting for the supervisor");
  CHECK(elapsed >= std::chrono::milliseconds(45));
  CHECK(elapsed < std::chrono::seconds(5));
}

TEST_CASE("zmtp: receive reports a peer that closed the connection") {
  auto router = std::make_unique<Peer>();
  ZmtpClient client = connect_to(router->endpoint);
  REQUIRE(client.send("HELLO", kTimeoutMs).is_ok());
  REQUIRE(router->receive().size() == 2);
  router->socket.close();
  router->ctx.close();
  auto got = client.receive(kTimeoutMs, 1024);
  REQUIRE_FALSE(got.has_value());
  CHECK(got.error() == "the supervisor closed the connection");
}

TEST_CASE("zmtp: a peer that is not a ROUTER is refused") {
  Peer dealer(zmq::socket_type::dealer);
  ZmtpClient client = connect_to(dealer.endpoint);
  const Status sent = client.send("HELLO", kTimeoutMs);
  REQUIRE_FALSE(sent.is_ok());
  CHECK(sent.message() == "the supervisor's socket is DEALER, not ROUTER");
}

TEST_CASE("zmtp: connecting to a path nobody listens on names the path") {
  test::ScratchDir dir{"zmtp"};
  const std::string path = dir.path + "/nobody-here";
  auto client = ZmtpClient::connect("ipc://" + path);
  REQUIRE_FALSE(client.has_value());
  CHECK(contains(client.error(), path));
  CHECK(contains(client.error(), "No such file or directory"));
}

TEST_CASE("zmtp: only ipc:// endpoints are accepted") {
  for (const std::string endpoint : {"tcp://127.0.0.1:5555", "inproc://x", "", "ipc:/tmp/x", "IPC:///tmp/x"}) {
    CAPTURE(endpoint);
    auto client = ZmtpClient::connect(endpoint);
    REQUIRE_FALSE(client.has_value());
    CHECK(client.error() == "not an ipc:// endpoint: " + endpoint);
  }
  auto too_long = ZmtpClient::connect("ipc:///" + std::string(200, 'a'));
  REQUIRE_FALSE(too_long.has_value());
  CHECK(contains(too_long.error(), "endpoint path too long"));
}

}  // namespace
}  // namespace pillbox::sandbox
