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
