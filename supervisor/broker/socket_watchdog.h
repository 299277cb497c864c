#pragma once
// A deadline for a blocking write a library makes: rabbitmq-c 0.11 waits
// for a writable socket without one (amqp_basic_publish), and a broker that
// blocks publishers (a memory or disk alarm) stops reading, so a publish
// would wait for ever. While armed, the watchdog's thread shuts the socket
// down at the deadline; the write then fails, and the caller knows why
// (expired()). Written here because neither rabbitmq-c nor Boost offers a
// deadline for another library's write; one thread per watchdog, armed and
// disarmed without a syscall of its own beyond a futex.
#include <chrono>
#include <condition_variable>
#include <mutex>
#include <thread>

namespace pillbox::broker {

class SocketWatchdog {
 public:
  SocketWatchdog();
  ~SocketWatchdog();
  SocketWatchdog(const SocketWatchdog&) = delete;
  SocketWatchdog& operator=(const SocketWatchdog&) = delete;

  // Shuts `fd` down (SHUT_RDWR) if disarm() has not come within `limit`.
  void arm(int fd, std::chrono::steady_clock::duration limit);
  // True when the deadline passed and the socket was shut down.
  bool disarm();

 private:
  void watch();

  std::mutex mutex_;
  std::condition_variable changed_;
  int fd_ = -1;  // armed when >= 0
  std::chrono::steady_clock::time_point deadline_;
  bool expired_ = false;
  bool stopping_ = false;
  std::thread thread_;
};

}  // namespace pillbox::broker
