#include "shared/seccomp_notify.h"

#include <fcntl.h>
#include <linux/seccomp.h>
#include <poll.h>
#include <sys/ioctl.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <string>

namespace pillbox {

Expected<std::pair<UniqueFd, UniqueFd>> listener_socketpair() {
  int pair[2];
  if (::socketpair(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0, pair) != 0) {
    return Error{std::string("socketpair (seccomp listener): ") + std::strerror(errno)};
  }
  UniqueFd parent(pair[0]), child(pair[1]);
  if (::fcntl(parent.get(), F_SETFL, ::fcntl(parent.get(), F_GETFL) | O_NONBLOCK) != 0) {
    return Error{std::string("fcntl (seccomp listener): ") + std::strerror(errno)};
  }
  return std::make_pair(std::move(parent), std::move(child));
}

bool send_listener(int socket_fd, int listener) {
  char byte = listener >= 0 ? 'L' : 'N';
  iovec iov{&byte, 1};
  alignas(cmsghdr) char control[CMSG_SPACE(sizeof(int))] = {};
  msghdr msg{};
  msg.msg_iov = &iov;
  msg.msg_iovlen = 1;
  if (listener >= 0) {
    msg.msg_control = control;
    msg.msg_controllen = sizeof control;
    cmsghdr* c = CMSG_FIRSTHDR(&msg);
    c->cmsg_level = SOL_SOCKET;
    c->cmsg_type = SCM_RIGHTS;
    c->cmsg_len = CMSG_LEN(sizeof(int));
    std::memcpy(CMSG_DATA(c), &listener, sizeof listener);
  }
  ssize_t n;
  while ((n = ::sendmsg(socket_fd, &msg, MSG_NOSIGNAL)) < 0 && errno == EINTR) {
  }
  return n == 1;
}

int ViolationWatch::fd() const {
  if (socket_.valid()) return socket_.get();
  return listener_.get();  // -1 when it is gone too
}

bool ViolationWatch::take() {
  if (socket_.valid()) {
    char byte = 0;
    iovec iov{&byte, 1};
    alignas(cmsghdr) char control[CMSG_SPACE(sizeof(int) * 4)];
    msghdr msg{};
    msg.msg_iov = &iov;
    msg.msg_iovlen = 1;
    msg.msg_control = control;
    msg.msg_controllen = sizeof control;
    const ssize_t n = ::recvmsg(socket_.get(), &msg, MSG_CMSG_CLOEXEC | MSG_DONTWAIT);
    if (n < 0 && (errno == EAGAIN || errno == EINTR)) return false;
    // One message, then the socket is done with: EOF (the child died before
    // sending) or an error leave the task unwatched.
    for (cmsghdr* c = CMSG_FIRSTHDR(&msg); n > 0 && c != nullptr; c = CMSG_NXTHDR(&msg, c)) {
      if (c->cmsg_level != SOL_SOCKET || c->cmsg_type != SCM_RIGHTS) continue;
      const std::size_t k = (c->cmsg_len - CMSG_LEN(0)) / sizeof(int);
      for (std::size_t i = 0; i < k; ++i) {
        int fd;
        std::memcpy(&fd, CMSG_DATA(c) + i * sizeof(int), sizeof fd);
        if (i == 0 && byte == 'L' && !listener_.valid()) {
          listener_.reset(fd);
        } else {
          ::close(fd);
        }
      }
    }
    socket_.reset();
    if (listener_.valid()) {
      ::fcntl(listener_.get(), F_SETFL, ::fcntl(listener_.get(), F_GETFL) | O_NONBLOCK);
      watched_ = true;
    }
  }
  if (!listener_.valid()) return false;
  bool first = false;
  for (;;) {
    pollfd p{listener_.get(), POLLIN, 0};
    if (::poll(&p, 1, 0) <= 0) return first;
    if (p.revents & POLLIN) {
      seccomp_notif notif;
      std::memset(&notif, 0, sizeof notif);  // the kernel wants it zeroed
      if (::ioctl(listener_.get(), SECCOMP_IOCTL_NOTIF_RECV, &notif) == 0) {
        // Not answered: the process stays in the syscall until it is killed.
        if (!violation_) {
          violation_ = Violation{notif.data.nr, notif.data.arch};
          first = true;
        }
        continue;
      }
      if (errno == EINTR || errno == ENOENT) continue;  // ENOENT: its process died meanwhile
      listener_.reset();  // a listener that cannot be read is of no more use
      return first;
    }
    if (p.revents & (POLLHUP | POLLERR | POLLNVAL)) listener_.reset();  // no process uses the filter any more
    return first;
  }
}

}  // namespace pillbox
