// The deadline for another library's blocking write
// (supervisor/broker/socket_watchdog.h): a real blocking write on a socket
// whose peer never reads ends when the deadline passes, and one that
// finishes in time leaves the socket alone.
#include <doctest/doctest.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <csignal>
#include <string>

#include "supervisor/broker/socket_watchdog.h"

using pillbox::broker::SocketWatchdog;
using namespace std::chrono_literals;

namespace {

struct Pair {
  int fd[2] = {-1, -1};
  Pair() { REQUIRE(::socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, fd) == 0); }
  ~Pair() {
    ::close(fd[0]);
    ::close(fd[1]);
  }
};

// Writes all of `bytes` to a blocking socket; -1 and errno when it fails.
ssize_t write_all(int fd, const std::string& bytes) {
  std::size_t done = 0;
  while (done < bytes.size()) {
    const ssize_t n = ::send(fd, bytes.data() + done, bytes.size() - done, MSG_NOSIGNAL);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) return -1;
    done += static_cast<std::size_t>(n);
  }
  return static_cast<ssize_t>(done);
}

}  // namespace

TEST_CASE("socket watchdog: a write its peer never reads ends at the deadline") {
  Pair p;
  SocketWatchdog watchdog;
  const std::string big(8u << 20, 'x');  // far over a socket's buffers
  const auto t0 = std::chrono::steady_clock::now();
  watchdog.arm(p.fd[0], 200ms);
  const ssize_t wrote = write_all(p.fd[0], big);
  const int error = errno;
  const bool expired = watchdog.disarm();
  const auto took = std::chrono::steady_clock::now() - t0;
  CHECK(wrote == -1);
  CHECK(error == EPIPE);
  CHECK(expired);
  CHECK(took >= 200ms);
  CHECK(took < 5s);
}

TEST_CASE("socket watchdog: a write done in time, and a disarmed watchdog, leave the socket alone") {
  Pair p;
  SocketWatchdog watchdog;
  watchdog.arm(p.fd[0], 5s);
  CHECK(write_all(p.fd[0], "small") == 5);
  CHECK_FALSE(watchdog.disarm());
  // Armed again with a short deadline and disarmed at once: nothing fires
  // later on the (still used) socket.
  watchdog.arm(p.fd[0], 50ms);
  CHECK_FALSE(watchdog.disarm());
  ::usleep(150'000);  // past the old deadline: the watchdog's thread would have fired by now
  CHECK(write_all(p.fd[0], "again") == 5);
  char buf[16];
  CHECK(::recv(p.fd[1], buf, sizeof buf, 0) == 10);
}
