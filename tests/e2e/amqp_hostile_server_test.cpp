// The RabbitMQ connection (supervisor/broker/amqp_connection.h) against a
// hostile or broken server: a fake one on a loopback port, written here
// frame by frame (AMQP 0-9-1), that does the handshake and then misbehaves.
// What it says goes into errors cut, on one line, without the password; a
// server that stops in the middle of a message fails the call within the
// connection's timeout instead of hanging the worker.
//
// Publisher confirms (confirm_publishes, publish, wait_confirmed) against a
// broker that lies about them: confirms never sent, sent for tags never
// published, sent twice, out of order, or refused; a returned message whose
// content is huge or never comes; connection.blocked with a hostile reason;
// a channel closed in place of a confirm; a broker that stops reading while
// a large message is sent. Each call is run with a bound of its own (a
// std::async waited for): a regression that hangs fails the test, and the
// fake then goes away, which frees the call.
#include <doctest/doctest.h>

#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <cstdlib>
#include <functional>
#include <future>
#include <mutex>
#include <new>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "tests/child_run.h"
#include "supervisor/broker/amqp_connection.h"
#include "supervisor/broker/amqp_publisher.h"

using pillbox::Status;
using pillbox::broker::AmqpConnection;
using namespace std::chrono_literals;

// The largest single allocation made while `g_watch_allocations` is set: a
// hostile header's announced body size must not become an allocation before
// the bytes come. (Replaces the global operator new of this test program.)
namespace {
std::atomic<bool> g_watch_allocations{false};
std::atomic<std::size_t> g_largest_allocation{0};
void* allocate(std::size_t n) {
  if (g_watch_allocations.load(std::memory_order_relaxed)) {
    std::size_t seen = g_largest_allocation.load(std::memory_order_relaxed);
    while (n > seen && !g_largest_allocation.compare_exchange_weak(seen, n)) {
    }
  }
  if (void* p = std::malloc(n == 0 ? 1 : n)) return p;
  throw std::bad_alloc();
}
}  // namespace
void* operator new(std::size_t n) { return allocate(n); }
void* operator new[](std::size_t n) { return allocate(n); }
void operator delete(void* p) noexcept { std::free(p); }
void operator delete[](void* p) noexcept { std::free(p); }
void operator delete(void* p, std::size_t) noexcept { std::free(p); }
void operator delete[](void* p, std::size_t) noexcept { std::free(p); }

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

// One frame as the client sent it.
struct Frame {
  int type = -1;  // 1 method, 2 content header, 3 body, 8 heartbeat; -1 the client left
  std::uint16_t channel = 0;
  std::string payload;
  // class << 16 | method of a method frame, else 0.
  std::uint32_t method_id() const {
    if (type != 1 || payload.size() < 4) return 0;
    return (std::uint32_t(std::uint8_t(payload[0])) << 24) | (std::uint32_t(std::uint8_t(payload[1])) << 16) |
           (std::uint32_t(std::uint8_t(payload[2])) << 8) | std::uint8_t(payload[3]);
  }
};
constexpr std::uint32_t id_of(std::uint16_t cls, std::uint16_t id) { return (std::uint32_t(cls) << 16) | id; }

// One client, served by `script` on its own thread; the socket is closed
// when the fake goes out of scope or end() is called (which ends a client
// still waiting, and a script still sending: its sends then fail).
class FakeBroker {
 public:
  // `receive_buffer` > 0: the accepted socket's SO_RCVBUF (set on the
  // listener, so the window is small from the first byte): a fake that
  // stops reading then makes the client's writes block soon.
  explicit FakeBroker(std::function<void(FakeBroker&)> script, int receive_buffer = 0) {
    listener_ = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (receive_buffer > 0) {
      REQUIRE(::setsockopt(listener_, SOL_SOCKET, SO_RCVBUF, &receive_buffer, sizeof receive_buffer) == 0);
    }
    sockaddr_in a{};
    a.sin_family = AF_INET;
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    REQUIRE(::bind(listener_, reinterpret_cast<sockaddr*>(&a), sizeof a) == 0);
    REQUIRE(::listen(listener_, 1) == 0);
    socklen_t n = sizeof a;
    REQUIRE(::getsockname(listener_, reinterpret_cast<sockaddr*>(&a), &n) == 0);
    port_ = ntohs(a.sin_port);
    thread_ = std::thread([this, script] {
      const int c = ::accept4(listener_, nullptr, nullptr, SOCK_CLOEXEC);
      client_.store(c);
      if (c >= 0 && !stopping()) script(*this);
    });
  }
  ~FakeBroker() { end(); }
  // The fake goes away: its script is told to stop, its socket is shut
  // down and then closed (with unread bytes: a reset, which ends a client
  // blocked in a write). Called once or more, from the test's thread.
  void end() {
    if (ended_) return;
    ended_ = true;
    {
      std::lock_guard lock(mutex_);
      stopping_ = true;
    }
    changed_.notify_all();
    ::shutdown(listener_, SHUT_RDWR);
    const int c = client_.load();
    if (c >= 0) ::shutdown(c, SHUT_RDWR);
    thread_.join();
    ::close(listener_);
    if (client_.load() >= 0) ::close(client_.load());
  }
  std::string url() const { return std::string("amqp://pillbox:") + kPassword + "@127.0.0.1:" + std::to_string(port_) + "/%2f"; }

  bool stopping() {
    std::lock_guard lock(mutex_);
    return stopping_;
  }
  // Waits `d`; false when end() came first.
  bool pause(std::chrono::steady_clock::duration d) {
    std::unique_lock lock(mutex_);
    return !changed_.wait_for(lock, d, [this] { return stopping_; });
  }
  // All of `bytes`, or false when the client left (never SIGPIPE).
  bool send(const std::string& bytes) {
    std::size_t done = 0;
    while (done < bytes.size()) {
      const ssize_t n = ::send(client_.load(), bytes.data() + done, bytes.size() - done, MSG_NOSIGNAL);
      if (n < 0 && errno == EINTR) continue;
      if (n <= 0) return false;
      done += static_cast<std::size_t>(n);
    }
    return true;
  }
  // The client's next frame; type -1 when it left.
  Frame read_any() {
    Frame f;
    std::string head = read_exactly(7);
    if (head.size() < 7) return f;
    const std::uint32_t size = (std::uint32_t(std::uint8_t(head[3])) << 24) | (std::uint32_t(std::uint8_t(head[4])) << 16) |
                               (std::uint32_t(std::uint8_t(head[5])) << 8) | std::uint8_t(head[6]);
    std::string rest = read_exactly(size + 1);
    if (rest.size() < size + 1) return f;
    f.type = std::uint8_t(head[0]);
    f.channel = static_cast<std::uint16_t>((std::uint8_t(head[1]) << 8) | std::uint8_t(head[2]));
    f.payload = rest.substr(0, size);
    return f;
  }
  // One frame's payload (type, channel and end byte dropped); "" when the client left.
  std::string read_frame() { return read_any().payload; }
  // A basic.publish and its content: the body's size, or -1 when the
  // client left or sent something else.
  long long read_publish() {
    if (read_any().method_id() != id_of(60, 40)) return -1;
    const Frame header = read_any();
    if (header.type != 2 || header.payload.size() < 12) return -1;
    std::uint64_t size = 0;
    for (int i = 4; i < 12; ++i) size = (size << 8) | std::uint8_t(header.payload[i]);
    std::uint64_t got = 0;
    while (got < size) {
      const Frame body = read_any();
      if (body.type != 3) return -1;
      got += body.payload.size();
    }
    return static_cast<long long>(size);
  }
  // confirm.select read, select-ok sent.
  void confirm_select() {
    read_frame();                   // confirm.select
    send(method(1, 85, 11));        // select-ok
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
    while (read_any().type >= 0) {
    }
  }

 private:
  std::string read_exactly(std::size_t n) {
    std::string out;
    char buf[65536];
    while (out.size() < n) {
      const ssize_t got = ::read(client_.load(), buf, std::min(sizeof buf, n - out.size()));
      if (got < 0 && errno == EINTR) continue;
      if (got <= 0) break;
      out.append(buf, static_cast<std::size_t>(got));
    }
    return out;
  }

  int listener_ = -1;
  std::atomic<int> client_{-1};
  int port_ = 0;
  std::mutex mutex_;
  std::condition_variable changed_;
  bool stopping_ = false;
  bool ended_ = false;
  std::thread thread_;
};

pillbox::Expected<AmqpConnection> open(const FakeBroker& fake, std::chrono::milliseconds timeout = 1500ms) {
  auto address = pillbox::broker::parse_amqp_url(fake.url());
  REQUIRE(address.has_value());
  return AmqpConnection::open(*address, timeout);
}

// What the broker sends about confirms, returns and blocking.
std::string ack(std::uint64_t tag, bool multiple = false) {
  return method(1, 60, 80, be64(tag) + std::string(1, multiple ? '\x01' : '\x00'));
}
std::string nack(std::uint64_t tag, bool multiple = false) {
  return method(1, 60, 120, be64(tag) + std::string(1, static_cast<char>((multiple ? 1 : 0) | 2)));  // requeue set
}
std::string basic_return(const std::string& text) {
  return method(1, 60, 50, be16(312) + shortstr(text) + shortstr("") + shortstr("q"));
}
std::string content_header(std::uint64_t body_size) { return frame(2, 1, be16(60) + be16(0) + be64(body_size) + be16(0)); }
std::string body_frame(const std::string& bytes) { return frame(3, 1, bytes); }
std::string connection_blocked(const std::string& reason) { return method(0, 10, 60, shortstr(reason)); }
std::string connection_unblocked() { return method(0, 10, 61); }
std::string channel_close(std::uint16_t code, const std::string& text) {
  return method(1, 20, 40, be16(code) + shortstr(text) + be16(60) + be16(40));
}

bool has(const std::string& text, const std::string& part) { return text.find(part) != std::string::npos; }

// A call's result and how long it took.
template <class T>
struct Timed {
  T value;
  std::chrono::steady_clock::duration took;
};

// Runs `call` on a thread of its own and waits at most `limit` for it: a
// call that has not returned by then fails the test (it hangs), and the
// fake goes away, which ends the call (its socket is reset).
template <class F>
auto bounded(FakeBroker& fake, std::chrono::seconds limit, F call) -> Timed<decltype(call())> {
  const auto started = std::chrono::steady_clock::now();
  auto result = std::async(std::launch::async, std::move(call));
  if (result.wait_for(limit) != std::future_status::ready) {
    FAIL_CHECK("the call did not return within " << limit.count() << " s: it hangs");
    fake.end();
  }
  auto value = result.get();
  return {std::move(value), std::chrono::steady_clock::now() - started};
}

double seconds(std::chrono::steady_clock::duration d) { return std::chrono::duration<double>(d).count(); }

// A connection with confirms on that has published `n` one-byte messages
// to the fake (which has read them, and then sends `replies`, then waits
// for the client to leave), and what wait_confirmed() said and when.
struct ConfirmRun {
  Status status;
  std::chrono::steady_clock::duration took{};
  bool broken = false;
};
ConfirmRun wait_after(int n, std::string replies, std::chrono::milliseconds timeout = 300ms) {
  FakeBroker fake([n, replies](FakeBroker& f) {
    f.handshake();
    f.confirm_select();
    for (int i = 0; i < n; ++i) f.read_publish();
    f.send(replies);
    f.hang();
  });
  auto c = open(fake, timeout);
  REQUIRE_MESSAGE(c.has_value(), c.error());
  REQUIRE(c->confirm_publishes().is_ok());
  for (int i = 0; i < n; ++i) REQUIRE(c->publish("q", "x").is_ok());
  auto waited = bounded(fake, 20s, [&] { return c->wait_confirmed(); });
  return {waited.value, waited.took, c->broken()};
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

// ---------------------------------------------------------------------------
// Publisher confirms against a hostile broker.
// ---------------------------------------------------------------------------

TEST_CASE("amqp confirms, hostile server: a broker that never confirms fails wait_confirmed within the timeout") {
  // 3 published, tag 1 acked, then nothing: 2 are not known to be in.
  const ConfirmRun run = wait_after(3, ack(1));
  REQUIRE_FALSE(run.status.is_ok());
  const std::string& e = run.status.message();
  CHECK_MESSAGE(has(e, "did not confirm 2 messages"), e);
  CHECK_MESSAGE(has(e, "may or may not be in the queue"), e);
  CHECK_MESSAGE(has(e, "amqp://pillbox@127.0.0.1:"), e);
  CHECK_FALSE(has(e, kPassword));
  CHECK(run.took >= 250ms);  // it did wait the timeout (300 ms)
  CHECK_MESSAGE(run.took < 3s, seconds(run.took));
  CHECK(run.broken);  // the frames are out of step now: every later call fails
}

TEST_CASE("amqp confirms, hostile server: confirm.select-ok that never comes fails confirm_publishes within the timeout") {
  FakeBroker fake([](FakeBroker& f) {
    f.handshake();
    f.read_frame();  // confirm.select, never answered
    f.hang();
  });
  auto c = open(fake, 300ms);
  REQUIRE_MESSAGE(c.has_value(), c.error());
  auto r = bounded(fake, 20s, [&] { return c->confirm_publishes(); });
  CHECK_FALSE(r.value.is_ok());
  CHECK_MESSAGE(r.took < 3s, seconds(r.took));
  // And wait_confirmed then says confirms are not on, instead of waiting.
  auto w = bounded(fake, 20s, [&] { return c->wait_confirmed(); });
  CHECK_FALSE(w.value.is_ok());
  CHECK(w.took < 1s);
}

TEST_CASE("amqp confirms, hostile server: acks and nacks of tags never published confirm nothing") {
  // If `tag > published` were not checked, ack(999, multiple) would set
  // confirmed to 999 and wait_confirmed would return ok with 2 messages
  // unconfirmed; ack(0, multiple) read as "all outstanding" (the spec's
  // reading for a server's ack) would do the same; nack(999) counted would
  // turn a fully acked batch into "refused".
  const std::string bogus = ack(999, true) + ack(999) + ack(0, true) + ack(0) + ack(3) + ack(3, true) +
                            nack(999, true) + nack(3) + nack(0, true);
  SUBCASE("then silence: the timeout error with both still unconfirmed") {
    const ConfirmRun run = wait_after(2, bogus);
    REQUIRE_FALSE(run.status.is_ok());
    CHECK_MESSAGE(has(run.status.message(), "did not confirm 2 messages"), run.status.message());
    CHECK_MESSAGE(run.took < 3s, seconds(run.took));
  }
  SUBCASE("then a real ack of both: ok, the bogus nacks not counted as refusals") {
    const ConfirmRun run = wait_after(2, bogus + ack(2, true));
    CHECK_MESSAGE(run.status.is_ok(), run.status.message());
    CHECK_FALSE(run.broken);
  }
}

TEST_CASE("amqp confirms, hostile server: each tag counts once, in any order") {
  SUBCASE("single acks out of order (2, 3, then 1): ok") {
    const ConfirmRun run = wait_after(3, ack(2) + ack(3) + ack(1));
    CHECK_MESSAGE(run.status.is_ok(), run.status.message());
  }
  SUBCASE("tag 1 acked three times does not confirm 2 and 3") {
    // A plain counter of acks would reach 3 and return ok.
    const ConfirmRun run = wait_after(3, ack(1) + ack(1) + ack(1));
    REQUIRE_FALSE(run.status.is_ok());
    CHECK_MESSAGE(has(run.status.message(), "did not confirm 2 messages"), run.status.message());
  }
  SUBCASE("tag 3 acked three times (ahead of 1 and 2) does not confirm 1 and 2") {
    const ConfirmRun run = wait_after(3, ack(3) + ack(3) + ack(3));
    REQUIRE_FALSE(run.status.is_ok());
    CHECK_MESSAGE(has(run.status.message(), "may or may not be in the queue"), run.status.message());
  }
  SUBCASE("nack then ack of the same tag: one refusal") {
    // Counting the nack and then the ack as well would confirm 2 tags on
    // tag 1 alone; counting refusals per frame would say 2.
    const ConfirmRun run = wait_after(2, nack(1) + ack(1) + ack(2));
    REQUIRE_FALSE(run.status.is_ok());
    CHECK_MESSAGE(has(run.status.message(), "refused 1 message ("), run.status.message());
    CHECK(has(run.status.message(), "basic.nack"));
  }
  SUBCASE("ack then nack of a tag ahead: not a refusal") {
    const ConfirmRun run = wait_after(2, ack(2) + nack(2) + nack(2, false) + ack(1));
    CHECK_MESSAGE(run.status.is_ok(), run.status.message());
  }
  SUBCASE("a multiple nack over singly acked tags refuses only the others") {
    // Tags 2 and 4 were acked; nack(5, multiple) refuses 1, 3 and 5. Without
    // the ahead set's acks subtracted it would say 5.
    const ConfirmRun run = wait_after(5, ack(2) + ack(4) + nack(5, true));
    REQUIRE_FALSE(run.status.is_ok());
    CHECK_MESSAGE(has(run.status.message(), "refused 3 messages"), run.status.message());
  }
  SUBCASE("a multiple ack over a nacked tag: one refusal") {
    const ConfirmRun run = wait_after(4, nack(3) + ack(4, true));
    REQUIRE_FALSE(run.status.is_ok());
    CHECK_MESSAGE(has(run.status.message(), "refused 1 message ("), run.status.message());
  }
  SUBCASE("the same multiple nack twice, then a nack below it: 2 refusals") {
    const ConfirmRun run = wait_after(2, nack(2, true) + nack(2, true) + nack(1));
    REQUIRE_FALSE(run.status.is_ok());
    CHECK_MESSAGE(has(run.status.message(), "refused 2 messages"), run.status.message());
  }
}

TEST_CASE("amqp confirms, hostile server: the count of unconfirmed messages leaves out those confirmed out of order") {
  // 3 published, tag 3 acked out of order, then silence: 2 messages are
  // unconfirmed, and the error says 2 (an attack found it said 3: the
  // operator was told message 3 may not be in the queue when the broker
  // said it is).
  const ConfirmRun run = wait_after(3, ack(3));
  REQUIRE_FALSE(run.status.is_ok());
  CHECK_MESSAGE(has(run.status.message(), "did not confirm 2 messages"), run.status.message());
}

TEST_CASE("amqp confirms, hostile server: batches in a row; stale confirms of an earlier batch count for nothing") {
  FakeBroker fake([](FakeBroker& f) {
    f.handshake();
    f.confirm_select();
    f.read_publish();
    f.read_publish();
    f.send(ack(2, true));
    f.read_publish();  // tag 3
    f.send(ack(1) + ack(2, true) + nack(2) + nack(1, true) + ack(3));
    f.read_publish();  // tag 4
    f.send(nack(3) + ack(3, true) + ack(4));
    f.read_publish();  // tag 5: only stale confirms
    f.send(ack(4, true) + nack(1, true));
    f.hang();
  });
  auto c = open(fake, 300ms);
  REQUIRE_MESSAGE(c.has_value(), c.error());
  REQUIRE(c->confirm_publishes().is_ok());
  REQUIRE(c->publish("q", "a").is_ok());
  REQUIRE(c->publish("q", "b").is_ok());
  auto first = bounded(fake, 20s, [&] { return c->wait_confirmed(); });
  CHECK_MESSAGE(first.value.is_ok(), first.value.message());
  REQUIRE(c->publish("q", "c").is_ok());
  auto second = bounded(fake, 20s, [&] { return c->wait_confirmed(); });
  CHECK_MESSAGE(second.value.is_ok(), second.value.message());
  REQUIRE(c->publish("q", "d").is_ok());
  auto third = bounded(fake, 20s, [&] { return c->wait_confirmed(); });
  CHECK_MESSAGE(third.value.is_ok(), third.value.message());
  REQUIRE(c->publish("q", "e").is_ok());
  auto fourth = bounded(fake, 20s, [&] { return c->wait_confirmed(); });
  REQUIRE_FALSE(fourth.value.is_ok());
  CHECK_MESSAGE(has(fourth.value.message(), "did not confirm 1 message within"), fourth.value.message());
  CHECK(fourth.took < 3s);
}

TEST_CASE("amqp confirms, hostile server: a repeated ack of one tag does not keep wait_confirmed waiting for ever") {
  // Only a confirm of something new moves the deadline. A broker that acks
  // tag 2 again every 100 ms, and never tag 1, for 5 s against a 300 ms
  // timeout: an attack found that this kept wait_confirmed (and pillbox
  // submit) waiting as long as the broker liked.
  FakeBroker fake([](FakeBroker& f) {
    f.handshake();
    f.confirm_select();
    f.read_publish();
    f.read_publish();
    const auto until = std::chrono::steady_clock::now() + 5s;
    while (std::chrono::steady_clock::now() < until && f.send(ack(2)) && f.pause(100ms)) {
    }
    f.hang();
  });
  auto c = open(fake, 300ms);
  REQUIRE_MESSAGE(c.has_value(), c.error());
  REQUIRE(c->confirm_publishes().is_ok());
  REQUIRE(c->publish("q", "a").is_ok());
  REQUIRE(c->publish("q", "b").is_ok());
  auto r = bounded(fake, 20s, [&] { return c->wait_confirmed(); });
  REQUIRE_FALSE(r.value.is_ok());
  CHECK_MESSAGE(has(r.value.message(), "may or may not be in the queue"), r.value.message());
  CHECK_MESSAGE(r.took < 3s, "wait_confirmed took " << seconds(r.took) << " s with a 300 ms timeout");
}

TEST_CASE("amqp confirms, hostile server: a flood of frames that confirm nothing does not outlast the timeout") {
  // Frames that are read and ignored (acks of a tag never published,
  // connection.unblocked, heartbeats), sent as fast as the socket takes
  // them for 5 s against a 300 ms timeout, do not hold wait_confirmed past
  // its deadline. (An attack found they did: the deadline was looked at
  // only when a wait timed out, and rabbitmq-c returns a frame whenever one
  // is there; heartbeats it consumes in its own loop, never returning while
  // they keep coming: hence the watchdog over each wait.)
  auto flood_of = [](const std::string& one) {
    std::string batch;
    while (batch.size() < 60000) batch += one;
    return batch;
  };
  std::string batch;
  SUBCASE("acks of tag 999") { batch = flood_of(ack(999)); }
  SUBCASE("connection.unblocked") { batch = flood_of(connection_unblocked()); }
  SUBCASE("heartbeats") { batch = flood_of(frame(8, 0, "")); }
  FakeBroker fake([batch](FakeBroker& f) {
    f.handshake();
    f.confirm_select();
    f.read_publish();
    f.read_publish();
    const auto until = std::chrono::steady_clock::now() + 5s;
    while (std::chrono::steady_clock::now() < until && !f.stopping() && f.send(batch)) {
    }
    f.hang();
  });
  auto c = open(fake, 300ms);
  REQUIRE_MESSAGE(c.has_value(), c.error());
  REQUIRE(c->confirm_publishes().is_ok());
  REQUIRE(c->publish("q", "a").is_ok());
  REQUIRE(c->publish("q", "b").is_ok());
  auto r = bounded(fake, 20s, [&] { return c->wait_confirmed(); });
  REQUIRE_FALSE(r.value.is_ok());
  CHECK_MESSAGE(has(r.value.message(), "did not confirm 2 messages"), r.value.message());
  CHECK_MESSAGE(r.took < 3s, "wait_confirmed took " << seconds(r.took) << " s with a 300 ms timeout");
}

TEST_CASE("amqp confirms, hostile server: a returned message's content is bounded in size and time") {
  SUBCASE("a header announcing 1 TiB: refused at once, nothing allocated for it") {
    g_largest_allocation = 0;
    g_watch_allocations = true;
    const ConfirmRun run = wait_after(1, basic_return("NO_ROUTE") + content_header(std::uint64_t{1} << 40));
    g_watch_allocations = false;
    REQUIRE_FALSE(run.status.is_ok());
    CHECK_MESSAGE(has(run.status.message(), "cannot read a returned message"), run.status.message());
    CHECK_MESSAGE(has(run.status.message(), "over the 1024 MiB"), run.status.message());
    CHECK(run.took < 3s);
    CHECK(run.broken);
    CHECK(g_largest_allocation.load() < (std::size_t{64} << 20));
  }
  SUBCASE("a header announcing 2^64 - 1 bytes") {
    const ConfirmRun run = wait_after(1, basic_return("NO_ROUTE") + content_header(~std::uint64_t{0}));
    REQUIRE_FALSE(run.status.is_ok());
    CHECK_MESSAGE(has(run.status.message(), "cannot read a returned message"), run.status.message());
    CHECK(run.took < 3s);
  }
  SUBCASE("a header announcing exactly 1 GiB, then nothing: no 1 GiB allocation") {
    // What the header announces is a claim: no buffer of that size before a
    // byte of the body came. (An attack found 21 bytes from the broker made
    // the client reserve 1 GiB, for a returned message it drops anyway:
    // where memory is not overcommitted, a std::bad_alloc nothing caught.)
    g_largest_allocation = 0;
    g_watch_allocations = true;
    const ConfirmRun run = wait_after(1, basic_return("NO_ROUTE") + content_header(std::uint64_t{1} << 30));
    g_watch_allocations = false;
    REQUIRE_FALSE(run.status.is_ok());
    CHECK_MESSAGE(has(run.status.message(), "cannot read a returned message"), run.status.message());
    CHECK_MESSAGE(run.took < 3s, seconds(run.took));
    CHECK_MESSAGE(g_largest_allocation.load() < (std::size_t{64} << 20),
                  "largest allocation: " << g_largest_allocation.load() << " bytes");
  }
  SUBCASE("a body that never comes: fails within the timeout") {
    const ConfirmRun run =
        wait_after(1, basic_return("NO_ROUTE") + content_header(100) + body_frame(std::string(10, 'x')));
    REQUIRE_FALSE(run.status.is_ok());
    CHECK_MESSAGE(has(run.status.message(), "cannot read a returned message"), run.status.message());
    CHECK(run.took >= 250ms);
    CHECK_MESSAGE(run.took < 3s, seconds(run.took));
    CHECK(run.broken);
  }
  SUBCASE("a body longer than its header said") {
    const ConfirmRun run = wait_after(1, basic_return("NO_ROUTE") + content_header(4) + body_frame("12345678") + ack(1));
    REQUIRE_FALSE(run.status.is_ok());
    CHECK_MESSAGE(has(run.status.message(), "longer than its header said"), run.status.message());
  }
  SUBCASE("something else in place of its header") {
    const ConfirmRun run = wait_after(1, basic_return("NO_ROUTE") + ack(1));
    REQUIRE_FALSE(run.status.is_ok());
    CHECK_MESSAGE(has(run.status.message(), "the broker sent something else"), run.status.message());
  }
  SUBCASE("a whole return, then the ack: not routed, in the broker's words made safe") {
    const ConfirmRun run = wait_after(
        2, basic_return(std::string("NO_ROUTE\nFAKE LOG LINE ") + kPassword + "\x1b[2J") + content_header(5) +
               body_frame("hello") + ack(1) + ack(2));
    REQUIRE_FALSE(run.status.is_ok());
    const std::string& e = run.status.message();
    CHECK_MESSAGE(has(e, "could not route 1 message to a queue (NO_ROUTE?FAKE LOG LINE ***?[2J)"), e);
    CHECK_FALSE(has(e, "\n"));
    CHECK_FALSE(has(e, "\x1b"));
    CHECK_FALSE(has(e, kPassword));
    CHECK_FALSE(run.broken);
  }
}

TEST_CASE("amqp confirms, hostile server: a large returned message that comes at a steady pace is read") {
  // Each frame of a message within the timeout, the whole body within the
  // timeout plus a second per MiB: a 2 MiB body in 64 KiB frames every
  // 40 ms (about 1.3 s) is read with a 300 ms timeout. (An attack found one
  // deadline for the whole message: with the default 5 s, a message taking
  // longer to arrive could never be read, and a returned one hid the real
  // error, not routed, behind "cannot read".)
  const std::string chunk(64 << 10, 'r');
  FakeBroker fake([&chunk](FakeBroker& f) {
    f.handshake();
    f.confirm_select();
    f.read_publish();
    f.send(basic_return("NO_ROUTE") + content_header(32 * chunk.size()));
    for (int i = 0; i < 32 && f.send(body_frame(chunk)) && f.pause(40ms); ++i) {
    }
    f.send(ack(1));
    f.hang();
  });
  auto c = open(fake, 300ms);
  REQUIRE_MESSAGE(c.has_value(), c.error());
  REQUIRE(c->confirm_publishes().is_ok());
  REQUIRE(c->publish("q", "x").is_ok());
  auto r = bounded(fake, 20s, [&] { return c->wait_confirmed(); });
  REQUIRE_FALSE(r.value.is_ok());
  CHECK_MESSAGE(has(r.value.message(), "could not route 1 message"), r.value.message());
}

TEST_CASE("amqp confirms, hostile server: connection.blocked's reason goes into the timeout error, made safe") {
  // A reason of 250 bytes (a short string's most is 255), with a CR LF, an
  // escape sequence and the password in it.
  const std::string reason = std::string("low on memory\r\nFAKE LOG LINE \x1b[31m ") + kPassword + " " +
                             std::string(250 - 44, 'z');
  SUBCASE("blocked, then silence") {
    const ConfirmRun run = wait_after(1, connection_blocked(reason));
    REQUIRE_FALSE(run.status.is_ok());
    const std::string& e = run.status.message();
    CHECK_MESSAGE(has(e, "did not confirm 1 message within"), e);
    CHECK_MESSAGE(has(e, "(it blocks publishers: low on memory??FAKE LOG LINE ?[31m *** zzz"), e);
    CHECK_MESSAGE(has(e, "; they may or may not be in the queue"), e);
    CHECK_FALSE(has(e, "\n"));
    CHECK_FALSE(has(e, "\r"));
    CHECK_FALSE(has(e, "\x1b"));
    CHECK_FALSE(has(e, kPassword));
    CHECK(run.took < 3s);
  }
  SUBCASE("blocked, unblocked, then silence: no reason given") {
    const ConfirmRun run = wait_after(1, connection_blocked(reason) + connection_unblocked());
    REQUIRE_FALSE(run.status.is_ok());
    CHECK_FALSE(has(run.status.message(), "blocks publishers"));
  }
  SUBCASE("blocked, then confirmed: ok") {
    const ConfirmRun run = wait_after(1, connection_blocked(reason) + ack(1));
    CHECK_MESSAGE(run.status.is_ok(), run.status.message());
  }
}

TEST_CASE("amqp confirms, hostile server: a channel or connection closed in place of a confirm") {
  const std::string text =
      std::string("PRECONDITION_FAILED - message size 200 is larger than configured max size 100\n") + kPassword;
  SUBCASE("channel.close 406") {
    FakeBroker fake([&text](FakeBroker& f) {
      f.handshake();
      f.confirm_select();
      f.read_publish();
      f.send(channel_close(406, text));
      f.hang();
    });
    auto c = open(fake, 300ms);
    REQUIRE_MESSAGE(c.has_value(), c.error());
    REQUIRE(c->confirm_publishes().is_ok());
    REQUIRE(c->publish("q", "x").is_ok());
    auto r = bounded(fake, 20s, [&] { return c->wait_confirmed(); });
    REQUIRE_FALSE(r.value.is_ok());
    const std::string& e = r.value.message();
    CHECK_MESSAGE(has(e, "refused a message it was sent: PRECONDITION_FAILED - message size 200 is larger than "
                         "configured max size 100?***"),
                  e);
    CHECK_FALSE(has(e, "\n"));
    CHECK_FALSE(has(e, kPassword));
    REQUIRE(c->refusal().has_value());
    CHECK(c->refusal()->code == 406);
    CHECK(c->broken());
    CHECK(r.took < 1s);
  }
  SUBCASE("connection.close 320") {
    const ConfirmRun run = wait_after(
        1, method(0, 10, 50, be16(320) + shortstr(std::string("CONNECTION_FORCED\n") + kPassword) + be16(0) + be16(0)));
    REQUIRE_FALSE(run.status.is_ok());
    CHECK_MESSAGE(has(run.status.message(), "refused a message it was sent: CONNECTION_FORCED?***"),
                  run.status.message());
    CHECK(run.broken);
  }
  SUBCASE("a frame that has no place here (basic.deliver)") {
    const ConfirmRun run =
        wait_after(1, method(1, 60, 60, shortstr("ctag") + be64(1) + std::string(1, '\0') + shortstr("") + shortstr("q")));
    REQUIRE_FALSE(run.status.is_ok());
    CHECK_MESSAGE(has(run.status.message(), "an unexpected frame"), run.status.message());
    CHECK(run.broken);
  }
}

TEST_CASE("amqp confirms, hostile server: confirms go on after a refusal reopens the channel") {
  // A refusal closes the channel and checked() opens it again: the new
  // channel is put in confirm mode again and its tags counted from 1, as
  // RabbitMQ does (confirms per channel, tags per channel; the fake here
  // does the same). (An attack found the new channel confirmed nothing and
  // the next wait_confirmed reported a message the broker took as maybe
  // lost.)
  FakeBroker fake([](FakeBroker& f) {
    f.handshake();
    bool confirming = false;
    std::uint64_t tag = 0;
    for (;;) {
      const Frame m = f.read_any();
      if (m.type < 0) return;
      const std::uint32_t id = m.method_id();
      if (id == id_of(85, 10)) {  // confirm.select
        confirming = true;
        f.send(method(1, 85, 11));
      } else if (id == id_of(60, 40)) {  // basic.publish: its header and body (one frame each here)
        f.read_any();
        f.read_any();
        if (confirming) f.send(ack(++tag));
      } else if (id == id_of(50, 10)) {  // queue.declare (passive, of a queue that is not there)
        f.send(channel_close(404, "NOT_FOUND - no queue 'missing' in vhost '/'"));
      } else if (id == id_of(20, 41)) {  // channel.close-ok: the channel is gone with its confirm mode
        confirming = false;
        tag = 0;
      } else if (id == id_of(20, 10)) {  // channel.open
        f.send(method(1, 20, 11, longstr("")));
      }
    }
  });
  auto c = open(fake, 300ms);
  REQUIRE_MESSAGE(c.has_value(), c.error());
  REQUIRE(c->confirm_publishes().is_ok());
  REQUIRE(c->publish("q", "a").is_ok());
  auto first = bounded(fake, 20s, [&] { return c->wait_confirmed(); });
  REQUIRE_MESSAGE(first.value.is_ok(), first.value.message());
  auto missing = c->check_queue("missing");
  REQUIRE_FALSE(missing.has_value());
  REQUIRE(c->refusal().has_value());
  CHECK(c->refusal()->code == 404);
  REQUIRE_FALSE(c->broken());
  REQUIRE(c->publish("q", "b").is_ok());
  auto second = bounded(fake, 20s, [&] { return c->wait_confirmed(); });
  // Ok (confirms selected again, tags counted from 1 again), or an error at
  // once that says confirms are off; not a timeout that calls a message
  // the broker took "maybe lost".
  CHECK_MESSAGE((second.value.is_ok() || !has(second.value.message(), "did not confirm")), second.value.message());
}

TEST_CASE("amqp confirms, hostile server: a broker that stops reading ends a large publish at its deadline") {
  // 8 MiB with a 300 ms timeout: a deadline of 8.3 s (a second per MiB).
  // The fake reads the first message, says it blocks publishers (a memory
  // alarm, in hostile words), acks it, and reads nothing more; its receive
  // window is small, so the client's send blocks after the send buffer's 4 MiB.
  const std::string reason = std::string("low on memory\n") + kPassword;
  FakeBroker fake(
      [&reason](FakeBroker& f) {
        f.handshake();
        f.confirm_select();
        f.read_publish();
        f.send(connection_blocked(reason) + ack(1));
        f.pause(60s);  // until end()
      },
      64 << 10);
  auto c = open(fake, 300ms);
  REQUIRE_MESSAGE(c.has_value(), c.error());
  REQUIRE(c->confirm_publishes().is_ok());
  REQUIRE(c->publish("q", "small").is_ok());
  auto first = bounded(fake, 20s, [&] { return c->wait_confirmed(); });
  REQUIRE_MESSAGE(first.value.is_ok(), first.value.message());
  const std::string big(8u << 20, 'b');
  auto r = bounded(fake, 30s, [&] { return c->publish("q", big); });
  REQUIRE_FALSE(r.value.is_ok());
  const std::string& e = r.value.message();
  CHECK_MESSAGE(has(e, "cannot publish to queue 'q': the broker did not take the message within 8300 ms"), e);
  CHECK_MESSAGE(has(e, "(it blocks publishers: low on memory?***)"), e);
  CHECK_FALSE(has(e, kPassword));
  CHECK_FALSE(has(e, "\n"));
  CHECK_MESSAGE(r.took >= 7500ms, seconds(r.took));
  CHECK_MESSAGE(r.took < 15s, seconds(r.took));
  CHECK(c->broken());
  // Every later call fails at once.
  auto again = bounded(fake, 20s, [&] { return c->publish("q", "x"); });
  CHECK_FALSE(again.value.is_ok());
  CHECK(again.took < 1s);
}

TEST_CASE("amqp confirms, hostile server: a large publish to a broker that reads it is not cut by the watchdog") {
  // The control for the test above: the same 8 MiB with a 300 ms timeout,
  // read at once, then acked. And a second one: the watchdog is armed anew.
  FakeBroker fake(
      [](FakeBroker& f) {
        f.handshake();
        f.confirm_select();
        for (std::uint64_t tag = 1; tag <= 2; ++tag) {
          if (f.read_publish() < 0) return;
          f.send(ack(tag));
        }
        f.hang();
      },
      64 << 10);
  auto c = open(fake, 300ms);
  REQUIRE_MESSAGE(c.has_value(), c.error());
  REQUIRE(c->confirm_publishes().is_ok());
  const std::string big(8u << 20, 'b');
  for (int i = 0; i < 2; ++i) {
    auto p = bounded(fake, 30s, [&] { return c->publish("q", big); });
    REQUIRE_MESSAGE(p.value.is_ok(), p.value.message());
    auto w = bounded(fake, 20s, [&] { return c->wait_confirmed(); });
    CHECK_MESSAGE(w.value.is_ok(), w.value.message());
  }
}

TEST_CASE("amqp confirms, hostile server: pillbox submit's publisher fails a batch the broker does not fully confirm") {
  // AmqpPublisher (submit's back end): the queue found (passive declare),
  // confirms on, a batch of 3 published, then the broker's answer.
  auto run = [](const std::string& replies) {
    FakeBroker fake([replies](FakeBroker& f) {
      f.handshake();
      f.read_frame();  // queue.declare, passive
      f.send(method(1, 50, 11, shortstr("jobs") + be32(0) + be32(0)));
      f.confirm_select();
      for (int i = 0; i < 3; ++i) f.read_publish();
      f.send(replies);
      f.hang();
    });
    auto c = open(fake, 300ms);
    REQUIRE_MESSAGE(c.has_value(), c.error());
    std::optional<pillbox::broker::AmqpTopology> declared;
    auto publisher = pillbox::broker::AmqpPublisher::open(*c, "jobs", declared);
    REQUIRE_MESSAGE(publisher.has_value(), publisher.error());
    CHECK_FALSE(declared.has_value());
    std::vector<pillbox::Task> batch(3);
    for (int i = 0; i < 3; ++i) {
      batch[i].key = "k" + std::to_string(i);
      batch[i].payload = "p" + std::to_string(i);
    }
    return bounded(fake, 20s, [&] { return publisher->add(batch); });
  };
  SUBCASE("all three acked, one of them twice and one ahead: the 3 ids") {
    auto r = run(ack(3) + ack(1) + ack(1) + ack(2));
    REQUIRE_MESSAGE(r.value.has_value(), r.value.error());
    REQUIRE(r.value->size() == 3);
    CHECK(r.value->at(0).rfind("pillbox-", 0) == 0);
    CHECK(r.value->at(0) != r.value->at(1));
  }
  SUBCASE("acks for tags of no message, then silence: an error within the timeout") {
    auto r = run(ack(1) + ack(7, true) + ack(0, true));
    REQUIRE_FALSE(r.value.has_value());
    CHECK_MESSAGE(has(r.value.error(), "did not confirm 2 messages"), r.value.error());
    CHECK(r.took < 3s);
  }
  SUBCASE("one nacked") {
    auto r = run(ack(1) + nack(2) + ack(3));
    REQUIRE_FALSE(r.value.has_value());
    CHECK_MESSAGE(has(r.value.error(), "refused 1 message ("), r.value.error());
  }
}

// ---------------------------------------------------------------------------
// A message's properties and headers from a hostile broker (or publisher):
// what message_of() takes from them, rabbitmq-c's decoder on the deepest
// and widest header a frame holds, and a content header of another class.
// What might crash or spin runs in a child process killed at its bound.
// ---------------------------------------------------------------------------

#include <pthread.h>
#include <signal.h>
#include <sys/resource.h>
#include <sys/wait.h>

#include <cstring>
#include <limits>

#include "supervisor/broker/amqp_death.h"

namespace {

using pillbox::broker::AmqpDeaths;
using pillbox::broker::AmqpMessage;
using pillbox::broker::AmqpTable;
using pillbox::broker::AmqpValue;

// Field values as the wire writes them (AMQP 0-9-1 as RabbitMQ reads it).
std::string v_string(const std::string& s) { return "S" + longstr(s); }
std::string v_bytes(const std::string& s) { return "x" + longstr(s); }
std::string v_u64(std::uint64_t v) { return "L" + be64(v); }
std::string v_i64(std::int64_t v) { return "l" + be64(static_cast<std::uint64_t>(v)); }
std::string v_i8(std::int8_t v) { return std::string("b") + static_cast<char>(v); }
std::string v_i32(std::int32_t v) { return "I" + be32(static_cast<std::uint32_t>(v)); }
std::string v_timestamp(std::uint64_t v) { return "T" + be64(v); }
std::string v_double(double d) {
  std::uint64_t bits;
  std::memcpy(&bits, &d, sizeof bits);
  return "d" + be64(bits);
}
std::string field(const std::string& name, const std::string& value) { return shortstr(name) + value; }
std::string table_of(const std::string& fields) { return be32(static_cast<std::uint32_t>(fields.size())) + fields; }
std::string v_table(const std::string& fields) { return "F" + table_of(fields); }
std::string v_array(const std::string& items) { return "A" + be32(static_cast<std::uint32_t>(items.size())) + items; }

// basic properties' flags (in the order their values follow the flags).
constexpr std::uint16_t kHeadersFlag = 0x2000;
constexpr std::uint16_t kCorrelationFlag = 0x0400;
constexpr std::uint16_t kReplyToFlag = 0x0200;
constexpr std::uint16_t kMessageIdFlag = 0x0080;

// A message's content: its header (class `cls`, `flags` and the
// properties' bytes) and its body in one frame.
std::string content(const std::string& body, std::uint16_t flags, const std::string& properties,
                    std::uint16_t cls = 60) {
  std::string out = frame(2, 1, be16(cls) + be16(0) + be64(body.size()) + be16(flags) + properties);
  if (!body.empty()) out += body_frame(body);
  return out;
}
std::string with_headers(const std::string& fields, const std::string& body = "payload") {
  return content(body, kHeadersFlag, table_of(fields));
}
std::string get_ok(std::uint64_t tag) {
  return method(1, 60, 71, be64(tag) + std::string(1, '\0') + shortstr("") + shortstr("q") + be32(0));
}

// The largest payload a frame may have (the tune's 131072, less the frame's
// 8 bytes), and of it what a content header with only headers leaves for
// the table's fields.
constexpr std::size_t kFramePayload = 131072 - 8;
constexpr std::size_t kHeaderFields = kFramePayload - 14 - 4;  // class, weight, size, flags; the table's size

// Until the client leaves: its channel.close and connection.close
// answered, so that a connection's destructor does not wait its timeout.
void answer_closes(FakeBroker& f) {
  for (;;) {
    const Frame m = f.read_any();
    if (m.type < 0) return;
    if (m.method_id() == id_of(20, 40)) f.send(method(m.channel, 20, 41));
    if (m.method_id() == id_of(10, 50)) f.send(method(0, 10, 51));
  }
}

// What one get() (or next()) gave.
struct Got {
  bool ok = false;
  std::string error;
  std::optional<AmqpMessage> message;
  double seconds = 0;
  bool broken = false;
  bool threw = false;  // the call threw (`error` says what) instead of returning an error
};

// One call's result as a Got (an exception it threw, too).
template <class F>
Got got_of(FakeBroker& fake, AmqpConnection& c, F call) {
  Got g;
  try {
    auto r = bounded(fake, 20s, call);
    g.seconds = seconds(r.took);
    g.ok = r.value.has_value();
    if (g.ok) {
      g.message = std::move(*r.value);
    } else {
      g.error = r.value.error();
    }
  } catch (const std::exception& e) {
    g.threw = true;
    g.error = e.what();
  }
  g.broken = c.broken();
  return g;
}

// A fake that answers each basic.get with get-ok and the next of
// `contents`; each get() bounded; what each gave.
std::vector<Got> get_each(const std::vector<std::string>& contents, std::chrono::milliseconds timeout = 1500ms) {
  FakeBroker fake([contents](FakeBroker& f) {
    f.handshake();
    for (std::size_t i = 0; i < contents.size(); ++i) {
      if (f.read_any().method_id() != id_of(60, 70)) return;  // basic.get
      if (!f.send(get_ok(i + 1) + contents[i])) return;
    }
    answer_closes(f);
  });
  auto c = open(fake, timeout);
  REQUIRE_MESSAGE(c.has_value(), c.error());
  std::vector<Got> out;
  for (std::size_t i = 0; i < contents.size(); ++i) {
    out.push_back(got_of(fake, *c, [&] { return c->get("q"); }));
    if (out.back().broken || out.back().threw) break;
  }
  return out;
}
// The same over a consume: basic.deliver and the next of `contents`, one
// every 200 ms (each after the client has read the one before: next()
// releases rabbitmq-c's buffers before it waits, so each message is
// decoded where the one before it was).
std::vector<Got> deliver_each(const std::vector<std::string>& contents, std::chrono::milliseconds timeout = 1500ms) {
  FakeBroker fake([contents](FakeBroker& f) {
    f.handshake();
    f.read_frame();                               // basic.qos
    f.send(method(1, 60, 11));                    // qos-ok
    f.read_frame();                               // basic.consume
    f.send(method(1, 60, 21, shortstr("ctag")));  // consume-ok
    for (std::size_t i = 0; i < contents.size(); ++i) {
      const std::string deliver =
          method(1, 60, 60, shortstr("ctag") + be64(i + 1) + std::string(1, '\0') + shortstr("") + shortstr("q"));
      if (!f.send(deliver + contents[i]) || !f.pause(200ms)) return;
    }
    answer_closes(f);
  });
  auto c = open(fake, timeout);
  REQUIRE_MESSAGE(c.has_value(), c.error());
  REQUIRE(c->consume("q", 1).is_ok());
  std::vector<Got> out;
  for (std::size_t i = 0; i < contents.size(); ++i) {
    out.push_back(got_of(fake, *c, [&] { return c->next(5s); }));
    if (out.back().broken || out.back().threw) break;
  }
  return out;
}
Got get_one(const std::string& content_frames) {
  auto all = get_each({content_frames});
  REQUIRE(all.size() == 1);
  return std::move(all[0]);
}

using test_support::ChildRun;
using test_support::in_child;

// `call` on a thread with a stack of `stack_bytes` (a worker thread's
// stack is what rabbitmq-c's recursive table decoder has).
std::string on_stack(std::size_t stack_bytes, std::function<std::string()> call) {
  struct Job {
    std::function<std::string()> call;
    std::string out;
  } job{std::move(call), {}};
  pthread_attr_t attr;
  pthread_attr_init(&attr);
  pthread_attr_setstacksize(&attr, stack_bytes);
  pthread_t t;
  const int made = pthread_create(
      &t, &attr,
      [](void* p) -> void* {
        auto* j = static_cast<Job*>(p);
        try {
          j->out = j->call();
        } catch (...) {
          j->out = "threw";
        }
        return nullptr;
      },
      &job);
  pthread_attr_destroy(&attr);
  if (made != 0) return "no thread";
  pthread_join(t, nullptr);
  return job.out;
}

// A message as one line: what the child says.
std::string summary(const Got& g) {
  if (g.threw) return "threw: " + g.error;
  if (!g.ok) return "error: " + g.error;
  if (!g.message) return "empty";
  const AmqpMessage& m = *g.message;
  return "ok fields=" + std::to_string(m.headers.size()) + " cut=" + (m.headers_cut ? "1" : "0") +
         " key=" + (m.key ? *m.key : std::string("<none>")) + " id=" + std::to_string(m.message_id.size()) +
         " corr=" + std::to_string(m.correlation_id.size()) + " reply=" + std::to_string(m.reply_to.size()) +
         " body=" + m.body;
}

}  // namespace

TEST_CASE("amqp messages, hostile headers: x-delivery-count, key and x-first-death-reason of the wrong kind") {
  struct Case {
    const char* what;
    std::string value;
    std::int64_t count;
  };
  const std::vector<Case> counts = {
      {"a string", v_string("7"), 0},
      {"2^64 - 1 (over int64: the most, never a first delivery)", v_u64(~std::uint64_t{0}),
       std::numeric_limits<std::int64_t>::max()},
      {"2^63 (over int64: the most)", v_u64(std::uint64_t{1} << 63), std::numeric_limits<std::int64_t>::max()},
      {"negative", v_i64(-5), 0},
      {"int64 min", v_i64(std::numeric_limits<std::int64_t>::min()), 0},
      {"a negative byte", v_i8(-1), 0},
      {"a double", v_double(3.0), 0},
      {"a table", v_table(field("x-delivery-count", v_i32(4))), 0},
      {"a 32-bit 3", v_i32(3), 3},
      {"a timestamp 9", v_timestamp(9), 9},
      {"int64 max", v_i64(std::numeric_limits<std::int64_t>::max()), std::numeric_limits<std::int64_t>::max()},
  };
  for (const Case& c : counts) {
    CAPTURE(c.what);
    // The first of a repeated name is read; a later one (here 99) is not.
    const Got g = get_one(with_headers(field("x-delivery-count", c.value) + field("x-delivery-count", v_i32(99)) +
                                       field("key", v_table(field("key", v_string("inner")))) +
                                       field("x-first-death-reason", v_array(v_string("rejected")))));
    REQUIRE_MESSAGE(g.ok, g.error);
    REQUIRE(g.message.has_value());
    CHECK(g.message->delivery_count == c.count);
    CHECK_FALSE(g.message->key.has_value());          // a table is no key
    CHECK(g.message->first_death_reason.empty());     // an array is no reason
    CHECK(g.message->body == "payload");
    CHECK(g.message->headers.size() == 4);
    CHECK(g.seconds < 3);
  }
}

TEST_CASE("amqp messages, hostile headers: properties of NUL and bytes that are not UTF-8 come as sent, JSON dumps") {
  const std::string odd = std::string("a\0b\xff\n\x1b[2J", 8);
  const std::string fields = field("key", v_bytes(odd)) + field("\xff\xfe", v_string("\xc3")) +
                             field(std::string("n\0l", 3), v_string(odd)) +
                             field("x-death", v_array(v_table(field("reason", v_string("rejected")) +
                                                              field("queue", v_string("jobs\xff")) +
                                                              field("count", v_u64(~std::uint64_t{0})))));
  const std::string properties = table_of(fields) + shortstr(odd) + shortstr(odd) + shortstr(odd);
  const Got g = get_one(content("b", kHeadersFlag | kCorrelationFlag | kReplyToFlag | kMessageIdFlag, properties));
  REQUIRE_MESSAGE(g.ok, g.error);
  REQUIRE(g.message.has_value());
  const AmqpMessage& m = *g.message;
  CHECK(m.correlation_id == odd);
  CHECK(m.reply_to == odd);
  CHECK(m.message_id == odd);
  REQUIRE(m.key.has_value());  // an 'x' byte array is text to pillbox: the key as its bytes
  CHECK(*m.key == odd);
  const nlohmann::json j = pillbox::broker::to_json(m.headers);
  CHECK(j.size() == 4);
  CHECK_NOTHROW((void)j.dump());
  const AmqpDeaths d = pillbox::broker::deaths_of(m.headers);
  REQUIRE(d.deaths.size() == 1);
  CHECK(d.deaths[0].count == 2147483647);  // 2^64 - 1: over int64, the most
}

TEST_CASE("amqp messages, hostile headers: x-death's JSON of a queue name that is not UTF-8 dumps") {
  // An attack found (now fixed): supervisor/broker/amqp_death.cpp:13-17, 56 and 64-77: the names in
  // x-death go into to_json(AmqpDeaths) as the bytes came; a queue name
  // "jobs\xff" from the wire makes a JSON whose dump() (default error
  // handler) throws type_error 316. (The unit test amqp_value_attack_test
  // has the cases and the proposed fix.)
  const Got g = get_one(with_headers(field(
      "x-death", v_array(v_table(field("reason", v_string("rejected")) + field("queue", v_string("jobs\xff")))))));
  REQUIRE_MESSAGE(g.ok, g.error);
  REQUIRE(g.message.has_value());
  const nlohmann::json j = pillbox::broker::to_json(pillbox::broker::deaths_of(g.message->headers));
  CHECK_NOTHROW((void)j.dump());
}

TEST_CASE("amqp messages, hostile headers: a delivery (basic.deliver) is read the same way") {
  FakeBroker fake([](FakeBroker& f) {
    f.handshake();
    f.read_frame();                               // basic.qos
    f.send(method(1, 60, 11));                    // qos-ok
    f.read_frame();                               // basic.consume
    f.send(method(1, 60, 21, shortstr("ctag")));  // consume-ok
    f.send(method(1, 60, 60, shortstr("ctag") + be64(7) + std::string(1, '\0') + shortstr("") + shortstr("q")) +
           with_headers(field("x-delivery-count", v_u64(~std::uint64_t{0})) + field("key", v_string("k1")) +
                        field("x-first-death-reason", v_string("delivery_limit"))));
    answer_closes(f);
  });
  auto c = open(fake);
  REQUIRE_MESSAGE(c.has_value(), c.error());
  REQUIRE(c->consume("q", 1).is_ok());
  auto r = bounded(fake, 20s, [&] { return c->next(5s); });
  REQUIRE_MESSAGE(r.value.has_value(), r.value.error());
  REQUIRE(r.value->has_value());
  const AmqpMessage& m = **r.value;
  CHECK(m.delivery_tag == 7);
  CHECK(m.delivery_count == std::numeric_limits<std::int64_t>::max());  // 2^64 - 1: over int64, the most
  CHECK(m.key == "k1");
  CHECK(m.first_death_reason == "delivery_limit");
}

TEST_CASE("amqp messages, hostile headers: a field of a kind AMQP has not, or a table whose size lies") {
  // rabbitmq-c refuses the frame: the call fails within the timeout, the
  // connection is broken (its frames are out of step), nothing crashes.
  const std::vector<std::pair<const char*, std::string>> cases = {
      {"kind 'Z'", with_headers(field("key", v_string("k")) + field("bad", "Z"))},
      {"kind 0", with_headers(field("bad", std::string(1, '\0')))},
      {"a table claiming 1 MiB", content("b", kHeadersFlag, be32(1u << 20) + field("key", v_string("k")))},
      {"a string claiming 4 GiB", with_headers(field("key", "S" + be32(0xffffffffu) + "k"))},
      {"a nested table claiming more than its parent", with_headers(field("t", "F" + be32(1000) + field("a", "V")))},
  };
  for (const auto& [name, frames] : cases) {
    const std::string what = name;  // clang 14 cannot capture a structured binding (CAPTURE's lambda)
    CAPTURE(what);
    const Got g = get_one(frames);
    CHECK_FALSE(g.ok);
    CHECK_MESSAGE(has(g.error, "cannot read queue 'q'"), g.error);
    CHECK(g.broken);
    CHECK(g.seconds < 5);
  }
}

TEST_CASE("amqp messages, hostile headers: 10000 and 65523 tiny fields: read in bounded time and memory") {
  std::string distinct;
  for (int i = 0; i < 10000; ++i) distinct += field("h" + std::to_string(i), "V");
  std::string same;
  while (same.size() + 2 <= kHeaderFields) same += field("", "V");  // 2 bytes each: as many as a frame holds
  const std::size_t same_count = same.size() / 2;
  REQUIRE(same_count == kHeaderFields / 2);  // 65523
  g_largest_allocation = 0;
  g_watch_allocations = true;
  const std::vector<Got> got = get_each({with_headers(distinct), with_headers(same)});
  g_watch_allocations = false;
  REQUIRE(got.size() == 2);
  for (const Got& g : got) {
    REQUIRE_MESSAGE(g.ok, g.error);
    REQUIRE(g.message.has_value());
    CHECK(g.seconds < 2);
  }
  CHECK(got[0].message->headers.size() == 10000);
  CHECK(got[1].message->headers.size() == same_count);
  MESSAGE("get() of 10000 fields: " << got[0].seconds << " s; of " << same_count << " fields: " << got[1].seconds
                                    << " s; largest allocation " << g_largest_allocation.load() << " bytes");
  CHECK(g_largest_allocation.load() < (std::size_t{16} << 20));
  // As an operator sees them (and as a dead letter carries them).
  const auto started = std::chrono::steady_clock::now();
  const nlohmann::json j = pillbox::broker::to_json(got[0].message->headers);
  CHECK(j.size() == 10000);
  CHECK(seconds(std::chrono::steady_clock::now() - started) < 2);
}

TEST_CASE("amqp messages, hostile headers: the fields of one name a frame holds are shown as JSON in bounded time") {
  // An attack found (now fixed): supervisor/broker/amqp_value.cpp:186-188: to_json(AmqpTable)
  // numbers repeated names by trying "NAME (2)", "NAME (3)", ... from 2
  // each time: quadratic. One header frame from the wire holds 65523
  // fields named "" (this test's first get); dead_letter_message
  // (amqp_dead_letter.cpp) shows a message's headers with to_json, so one
  // message from any publisher holds a worker for minutes. The fix:
  // a map of each base name to the next number to try.
  std::string same;
  while (same.size() + 2 <= kHeaderFields) same += field("", "V");
  const ChildRun run = in_child(15s, [&same] {
    const Got g = get_one(with_headers(same));
    if (!g.ok || !g.message) return "get failed: " + g.error;
    const auto started = std::chrono::steady_clock::now();
    const nlohmann::json j = pillbox::broker::to_json(g.message->headers);
    return "shown " + std::to_string(j.size()) + " in " +
           std::to_string(seconds(std::chrono::steady_clock::now() - started)) + " s";
  });
  INFO("child: " << run.said << " (" << run.seconds << " s" << std::string(run.timed_out ? ", killed at the bound" : "")
                  << ")");
  CHECK(run.finished);
  CHECK_FALSE(run.timed_out);
  CHECK(run.said.rfind("shown " + std::to_string(kHeaderFields / 2) + " in", 0) == 0);
  CHECK(run.seconds < 5);
}

TEST_CASE("amqp messages, hostile headers: nesting as deep as a frame holds is cut, and nothing crashes") {
  // rabbitmq-c 0.11 decodes nested tables and arrays by recursion without a
  // limit: a 128 KiB frame holds about 26000 levels of arrays (5 bytes
  // each) or 21800 of tables (6 bytes each). pillbox cuts what it keeps at
  // kMaxAmqpDepth. Run in a child (a stack overflow would end it, not this
  // program), the get() on a thread with a 4 MiB stack: rabbitmq-c's
  // recursion needs between 2 and 3 MiB for such a frame (a probe with
  // ulimit -s 2048 crashed in it; pillbox cannot bound that, it is
  // rabbitmq-c's), so a thread that reads AMQP needs more than that.
  const std::string key = field("key", v_string("k1"));
  const std::size_t room = kHeaderFields - key.size() - shortstr("deep").size();  // for the deep value
  std::string arrays = "V";
  while (arrays.size() + 5 <= room) arrays = v_array(arrays);
  std::string tables = "V";
  while (tables.size() + 6 <= room) tables = v_table(field("", tables));
  MESSAGE("levels: " << (arrays.size() - 1) / 5 << " of arrays, " << (tables.size() - 1) / 6 << " of tables");
  for (const auto& [name, deep] : {std::pair{"arrays", arrays}, std::pair{"tables", tables}}) {
    const std::string what = name;  // clang 14 cannot capture a structured binding (CAPTURE's lambda)
    CAPTURE(what);
    const std::string frames = with_headers(key + field("deep", deep), "deep body");
    REQUIRE(frames.size() - body_frame("deep body").size() <= kFramePayload + 8);
    const ChildRun run = in_child(30s, [&frames] {
      return on_stack(std::size_t{4} << 20, [&frames] { return summary(get_one(frames)); });
    });
    INFO("child: " << run.said << " (" << run.seconds << " s, signal " << run.signal << ")");
    CHECK(run.finished);
    CHECK_FALSE(run.killed_by_signal);
    CHECK(run.said == "ok fields=2 cut=1 key=k1 id=0 corr=0 reply=0 body=deep body");
    CHECK(run.seconds < 10);
  }
}

TEST_CASE("amqp messages, hostile headers: a content header of another class than basic is not read as basic's") {
  // An attack found (now fixed): supervisor/broker/amqp_connection.cpp:651-658 (read_content):
  // the header frame's class is not checked before its decoded properties
  // are cast to amqp_basic_properties_t. rabbitmq-c decodes a content
  // header of class 10, 20, 30, 40, 50, 85 or 90 as that class's properties:
  // an 8-byte struct of the flags alone (amqp_connection_properties_t, ...),
  // the flags as the broker wrote them. message_of() then reads the headers,
  // correlation_id, reply_to and message_id those flags name from past
  // that struct: from rabbitmq-c's pool, where (over a consume, whose
  // next() recycles the pool before each wait) the previous message's
  // properties were. A hostile broker gets a message read with another
  // message's headers and ids, their bytes read through pointers into
  // frames since overwritten. Seen here, over a consume: with only the
  // headers flag, SIGSEGV in table_from_amqp (the worker dies); with every
  // flag, next() throws std::logic_error "basic_string: construction from
  // null" out of bytes_text() (a length with a null pointer), from a call
  // that returns its errors. (Over basic.get the pool was not recycled and
  // the bytes past the struct happened to be zero.) The fix: in
  // read_content, after the frame-type check,
  //   if (frame.payload.properties.class_id != AMQP_BASIC_CLASS)
  //     return broken("the broker sent something else");
  const std::string first = content(
      "one", kHeadersFlag | kCorrelationFlag | kMessageIdFlag,
      table_of(field("key", v_string("first-key")) + field("secret", v_string("s3cr3t"))) + shortstr("first-corr") +
          shortstr("first-id"));
  const std::uint16_t every_flag = kHeadersFlag | kCorrelationFlag | kReplyToFlag | kMessageIdFlag;
  struct Way {
    bool consume;
    std::uint16_t cls;
    std::uint16_t flags;
  };
  std::vector<Way> ways;
  for (const bool consume : {false, true}) {
    for (const std::uint16_t cls : {std::uint16_t{10}, std::uint16_t{50}, std::uint16_t{85}}) {
      for (const std::uint16_t flags : {every_flag, kHeadersFlag}) ways.push_back({consume, cls, flags});
    }
  }
  for (const Way& way : ways) {
    CAPTURE(way.consume);
    CAPTURE(way.cls);
    CAPTURE(way.flags);
    const std::string second = content("two", way.flags, "", way.cls);
    const ChildRun run = in_child(30s, [&first, &second, &way] {
      const std::vector<Got> got = way.consume ? deliver_each({first, second}) : get_each({first, second});
      std::string out = got.size() > 0 ? summary(got[0]) : "none";
      out += " | " + (got.size() > 1 ? summary(got[1]) : std::string("none"));
      return out;
    });
    INFO("child: " << run.said << " (" << run.seconds << " s, signal " << run.signal << ")");
    CHECK(run.finished);
    CHECK_FALSE(run.killed_by_signal);
    if (!run.finished) continue;
    CHECK(run.said.rfind("ok fields=2 cut=0 key=first-key id=8 corr=10 reply=0 body=one | ", 0) == 0);
    const std::string second_read = run.said.substr(run.said.find(" | ") + 3);
    // Refused (the connection broken), or read with nothing of the first's.
    const bool refused = second_read.rfind("error: ", 0) == 0;
    const bool clean = second_read == "ok fields=0 cut=0 key=<none> id=0 corr=0 reply=0 body=two";
    CHECK_MESSAGE((refused || clean), "the second message was read as: " << second_read);
  }
}
