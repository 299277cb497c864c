#include "supervisor/broker/connection_link.h"

#include <pthread.h>
#include <signal.h>
#include <sys/eventfd.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cstdint>

namespace pillbox::broker::link_detail {

int make_event_fd() { return ::eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK); }

void raise_event(int fd) {
  const std::uint64_t one = 1;
  (void)!::write(fd, &one, sizeof one);
}

void clear_event(int fd) {
  std::uint64_t ignored = 0;
  (void)!::read(fd, &ignored, sizeof ignored);
}

void block_all_signals() {
  sigset_t all;
  ::sigfillset(&all);
  ::pthread_sigmask(SIG_BLOCK, &all, nullptr);
}

void shut_down_socket(int fd) { ::shutdown(fd, SHUT_RDWR); }

}  // namespace pillbox::broker::link_detail
