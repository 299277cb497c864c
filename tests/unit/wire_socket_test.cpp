#include "supervisor/exec/wire_socket.h"

#include <doctest/doctest.h>

#include <chrono>
#include <memory>
#include <optional>
#include <string>
#include <vector>
#include <zmq.hpp>

#include "sandbox/zmtp_client.h"
#include "tests/unit/scratch_dir.h"

namespace pillbox {
namespace {

constexpr int kTimeoutMs = 10'000;  // generous: only reached when something is broken

using Client = sandbox::ZmtpClient;

// A child's end: connected, handshake done, `message` sent.
Client connect_and_send(const WireSocket& socket, const std::string& message) {
  auto client = Client::connect(socket.endpoint());
  REQUIRE_MESSAGE(client, client.error());
  REQUIRE(client->start_handshake(kTimeoutMs));
  REQUIRE(client->send(message, kTimeoutMs));
  return std::move(*client);
}

// Waits (bounded) for one message's body on the socket.
std::string receive(WireSocket& socket) {
  std::vector<zmq::pollitem_t> items;
  socket.add_poll_items(items);
  zmq::poll(items.data(), 1, std::chrono::milliseconds(kTimeoutMs));
  zmq::message_t peer, body;
  REQUIRE(socket.socket().recv(peer, zmq::recv_flags::dontwait));
  REQUIRE(peer.more());
  REQUIRE(socket.socket().recv(body, zmq::recv_flags::none));
  return body.to_string();
}

// Waits (bounded) until the monitor reported `count` disconnects, reading
// the events the way a task's channel does.
void wait_for_disconnects(WireSocket& socket, int count) {
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::milliseconds(kTimeoutMs);
  while (count > 0 && std::chrono::steady_clock::now() < deadline) {
    std::vector<zmq::pollitem_t> items;
    socket.add_poll_items(items);
    zmq::poll(items.data() + 1, 1, std::chrono::milliseconds(100));
    for (auto event : socket.read_events(16)) count -= event == WireSocket::Event::kDisconnected ? 1 : 0;
  }
  REQUIRE(count <= 0);
}

struct Fixture {
  test::ScratchDir dir{"wire-socket"};
  zmq::context_t ctx{1};
  WirePool pool{ctx, dir.path, 1 << 20, 4};
};

}  // namespace

TEST_CASE("a wire socket serves the next task once its task's one connection is gone and read") {
  Fixture f;
  std::unique_ptr<WireSocket> socket = f.pool.acquire();
  WireSocket* const first = socket.get();
  {
    Client child = connect_and_send(*socket, "hello");
    CHECK(receive(*socket) == "hello");
    socket->task_ended(true);
    CHECK_FALSE(socket->ready_for_next_task());  // the child is still connected
    f.pool.release(std::move(socket));
    std::unique_ptr<WireSocket> meanwhile = f.pool.acquire();
    CHECK(meanwhile.get() != first);  // a new one
    CHECK(f.pool.sockets_bound() == 2);
  }
  wait_for_disconnects(*first, 1);
  std::unique_ptr<WireSocket> again = f.pool.acquire();
  CHECK(again.get() == first);
  CHECK(f.pool.sockets_bound() == 2);
}

TEST_CASE("a wire socket is not handed on while a frame of its last task is unread") {
  Fixture f;
  std::unique_ptr<WireSocket> socket = f.pool.acquire();
  {
    Client child = connect_and_send(*socket, "hello");
    REQUIRE(child.send("one more, after the answer", kTimeoutMs));
    CHECK(receive(*socket) == "hello");
  }
  socket->task_ended(true);
  wait_for_disconnects(*socket, 1);
  CHECK_FALSE(socket->ready_for_next_task());
  CHECK(receive(*socket) == "one more, after the answer");
  CHECK(socket->ready_for_next_task());
}

TEST_CASE("a wire socket that saw more connections than tasks, or a task it could not identify, is retired") {
  Fixture f;
  SUBCASE("a second connection, gone too") {
    std::unique_ptr<WireSocket> socket = f.pool.acquire();
    {
      Client child = connect_and_send(*socket, "hello");
      Client second = connect_and_send(*socket, "me too");
      CHECK(receive(*socket).size() > 0);
      CHECK(receive(*socket).size() > 0);
    }
    socket->task_ended(true);
    wait_for_disconnects(*socket, 2);
    CHECK_FALSE(socket->ready_for_next_task());
  }
  SUBCASE("a task that ended unidentified or broke a rule") {
    std::unique_ptr<WireSocket> socket = f.pool.acquire();
    socket->task_ended(false);
    CHECK(socket->retired());
    CHECK_FALSE(socket->ready_for_next_task());
    f.pool.release(std::move(socket));
    (void)f.pool.acquire();
    CHECK(f.pool.sockets_bound() == 2);  // not kept
  }
}

TEST_CASE("an idle wire socket something connects to is retired when its monitor reports it") {
  Fixture f;
  std::unique_ptr<WireSocket> socket = f.pool.acquire();
  const std::string endpoint = socket->endpoint();
  {
    Client child = connect_and_send(*socket, "hello");
    CHECK(receive(*socket) == "hello");
  }
  socket->task_ended(true);
  wait_for_disconnects(*socket, 1);
  f.pool.release(std::move(socket));
  REQUIRE(f.pool.idle() == 1);
  f.pool.tend();
  CHECK(f.pool.idle() == 1);  // its own task's events only: kept

  // A straggler that reaches the idle endpoint: the pool's poll items wake
  // on the monitor's report, and tending retires the socket, without any
  // task being launched. Without the tending its monitor queue would grow
  // with every connection until libzmq's IO thread blocked on it.
  auto intruder = Client::connect(endpoint);
  REQUIRE_MESSAGE(intruder, intruder.error());
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::milliseconds(kTimeoutMs);
  while (f.pool.idle() == 1 && std::chrono::steady_clock::now() < deadline) {
    std::vector<zmq::pollitem_t> items;
    REQUIRE(f.pool.add_poll_items(items) == 1);
    zmq::poll(items, std::chrono::milliseconds(100));
    if (items[0].revents & ZMQ_POLLIN) f.pool.tend();
  }
  CHECK(f.pool.idle() == 0);
  (void)f.pool.acquire();
  CHECK(f.pool.sockets_bound() == 2);  // a new one: the retired socket is closed
}

}  // namespace pillbox
