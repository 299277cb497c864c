// The link written once for every broker (supervisor/broker/connection_link.h),
// over a connection that needs no broker: its idle work (RabbitMQ's consume
// loop) gives way at once to work posted or to an owner that replaces it,
// however long that run would otherwise wait. A worker that stops clears
// its consume loop and then posts its acknowledgements: before the fix, each
// of them waited for the loop's timeout (a second per run on RabbitMQ).
#include <doctest/doctest.h>
#include <poll.h>
#include <sys/socket.h>

#include <atomic>
#include <chrono>
#include <future>
#include <string>

#include "shared/unique_fd.h"
#include "supervisor/broker/connection_link.h"

namespace {

// A connection the link can hold and shut down: one end of a socket pair.
struct FakeConnection {
  pillbox::UniqueFd end;
  pillbox::UniqueFd peer;
  int fd() const { return end.get(); }
};

FakeConnection make_connection() {
  int fds[2] = {-1, -1};
  REQUIRE(::socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, fds) == 0);
  return FakeConnection{pillbox::UniqueFd(fds[0]), pillbox::UniqueFd(fds[1])};
}

}  // namespace

namespace pillbox::broker {
template <>
struct LinkRules<FakeConnection> {
  using Mark = int;
  static Mark mark(const FakeConnection&) { return 0; }
  static BrokerShowed after(const FakeConnection&, const Mark&) { return BrokerShowed::kServes; }
  static std::string lost(const FakeConnection&, const std::string& name, BrokerShowed) { return name + " lost"; }
  static constexpr bool kServesOnceConnected = true;
};
}  // namespace pillbox::broker

namespace {

using pillbox::broker::ConnectionLink;
using namespace std::chrono_literals;

class FakeLink : public ConnectionLink<FakeConnection> {
 public:
  FakeLink()
      : ConnectionLink("fake", [](bool, const std::string&) {}, [] { return pillbox::Expected<FakeConnection>(make_connection()); },
                       nullptr, make_connection()) {
    REQUIRE(start());
  }
};

// Idle work that waits on the link's wake fd for up to `limit`, as
// RabbitMQ's consume loop waits for a delivery; it says whether a wake (not
// the limit) ended its run.
struct WaitingIdle {
  std::promise<void> started;
  std::atomic<bool> started_once{false};
  std::atomic<int> woken{0};
  std::atomic<int> timed_out{0};

  FakeLink::Work work(FakeLink& link, std::chrono::milliseconds limit) {
    return [this, &link, limit](FakeConnection&) -> FakeLink::Done {
      if (!started_once.exchange(true)) started.set_value();
      pollfd p{link.wake_fd(), POLLIN, 0};
      if (::poll(&p, 1, static_cast<int>(limit.count())) > 0) {
        ++woken;
      } else {
        ++timed_out;
      }
      return nullptr;
    };
  }
};

// Drains until `done` holds, waiting on wait_fd() for at most `limit` in all.
bool drain_until(FakeLink& link, const std::atomic<bool>& done, std::chrono::milliseconds limit) {
  const auto until = std::chrono::steady_clock::now() + limit;
  while (!done) {
    const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(until - std::chrono::steady_clock::now());
    if (left <= 0ms) return false;
    pollfd p{link.wait_fd(), POLLIN, 0};
    ::poll(&p, 1, static_cast<int>(left.count()));
    link.drain();
  }
  return true;
}

}  // namespace

TEST_CASE("connection link: work posted while idle work runs wakes it") {
  FakeLink link;
  WaitingIdle idle;
  link.set_idle(idle.work(link, 60s));
  idle.started.get_future().wait();
  std::atomic<bool> ran{false};
  link.post([&](FakeConnection&) -> FakeLink::Done { return [&] { ran = true; }; });
  // Well under the idle run's 60 s: the post woke it.
  CHECK(drain_until(link, ran, 30s));
  CHECK(idle.woken >= 1);
  CHECK(idle.timed_out == 0);
  link.stop();
}

TEST_CASE("connection link: an owner that clears the idle work, then posts, does not wait for the idle run") {
  FakeLink link;
  WaitingIdle idle;
  link.set_idle(idle.work(link, 60s));
  idle.started.get_future().wait();
  // As AmqpBackEnd::stop_reading does: no more consuming, then the
  // acknowledgements of what is settled.
  link.set_idle(nullptr);
  std::atomic<bool> ran{false};
  link.post([&](FakeConnection&) -> FakeLink::Done { return [&] { ran = true; }; });
  CHECK(drain_until(link, ran, 30s));
  CHECK(idle.woken == 1);
  CHECK(idle.timed_out == 0);
  link.stop();
}

TEST_CASE("connection link: replacing the idle work ends the run of the old one at once") {
  FakeLink link;
  WaitingIdle first;
  link.set_idle(first.work(link, 60s));
  first.started.get_future().wait();
  WaitingIdle second;
  link.set_idle(second.work(link, 60s));
  // The second runs only once the first's run returned: by the wake.
  second.started.get_future().wait();
  CHECK(first.woken == 1);
  CHECK(first.timed_out == 0);
  link.stop();
}
