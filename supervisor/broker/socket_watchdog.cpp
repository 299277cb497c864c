#include "supervisor/broker/socket_watchdog.h"

#include <sys/socket.h>

namespace pillbox::broker {

SocketWatchdog::SocketWatchdog() : thread_([this] { watch(); }) {}

SocketWatchdog::~SocketWatchdog() {
  {
    std::lock_guard lock(mutex_);
    stopping_ = true;
  }
  changed_.notify_one();
  thread_.join();
}

void SocketWatchdog::arm(int fd, std::chrono::steady_clock::duration limit) {
  {
    std::lock_guard lock(mutex_);
    fd_ = fd;
    deadline_ = std::chrono::steady_clock::now() + limit;
    expired_ = false;
  }
  changed_.notify_one();
}

bool SocketWatchdog::disarm() {
  std::lock_guard lock(mutex_);
  fd_ = -1;
  return expired_;
}

void SocketWatchdog::watch() {
  std::unique_lock lock(mutex_);
  while (!stopping_) {
    if (fd_ < 0) {
      changed_.wait(lock);
      continue;
    }
    // Under the lock: the fd is the armed one, still open (its owner
    // disarms before it closes it).
    if (std::chrono::steady_clock::now() >= deadline_) {
      ::shutdown(fd_, SHUT_RDWR);
      expired_ = true;
      fd_ = -1;
      continue;
    }
    changed_.wait_until(lock, deadline_);
  }
}

}  // namespace pillbox::broker
