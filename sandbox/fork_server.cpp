#include "sandbox/fork_server.h"

#include <fcntl.h>
#include <poll.h>
#include <sched.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <cerrno>
#include <cstdint>
#include <cstring>
#include <string>

#include "sandbox/exit_codes.h"
#include "shared/child_config.h"
#include "shared/task_input.h"

namespace pillbox::sandbox {
namespace {

// A request: one byte saying which of the five fds ride along (in
// SCM_RIGHTS, in this order), then the ticket as encode_ticket lays it out.
constexpr std::uint8_t kHasCrash = 1, kHasStdout = 2, kHasStderr = 4, kHasListenerSocket = 8, kHasMountNs = 16,
                       kHasPayloadMemfd = 32;
// Tickets are a few hundred bytes, plus an exec task's key.
constexpr std::size_t kMaxRequest = 64 * 1024 + kMaxTaskKeyBytes;
constexpr std::size_t kMaxFds = 6;
constexpr std::size_t kMaxCgroupPaths = 16;
// The server answers within a millisecond or so. One that does not was
// stopped or is stuck (without root, a task runs under the same uid and can
// signal it): it is killed and the zygote restarted, rather than hanging.
constexpr int kReplyTimeoutMs = 10'000;

// The ticket in a flat layout: fixed-size fields, then length-prefixed
// strings. Decoding it in the child costs a few string copies; decoding the
// msgpack control message there cost ~0.5 ms of copy-on-write faults and
// allocation per task (measured).
void put_u32(std::string& out, std::uint32_t v) { out.append(reinterpret_cast<const char*>(&v), sizeof v); }
void put_u64(std::string& out, std::uint64_t v) { out.append(reinterpret_cast<const char*>(&v), sizeof v); }
void put_str(std::string& out, std::string_view v) {
  put_u32(out, static_cast<std::uint32_t>(v.size()));
  out.append(v);
}

void encode_ticket(const TaskTicket& t, std::string& out) {
  put_u64(out, t.seq);
  put_u32(out, t.uid);
  put_u32(out, t.gid);
  put_u32(out, t.slot);
  out.append(reinterpret_cast<const char*>(t.secret.data()), t.secret.size());
  put_str(out, t.endpoint);
  put_u32(out, static_cast<std::uint32_t>(t.cgroup_procs.size()));
  for (const std::string& path : t.cgroup_procs) put_str(out, path);
  put_str(out, t.key);
}

// Reads what encode_ticket wrote (both sides are this binary); false when
// the bytes end early.
class TicketReader {
 public:
  TicketReader(const char* p, std::size_t n) : p_(p), end_(p + n) {}
  template <typename T>
  bool get(T& v) {
    if (static_cast<std::size_t>(end_ - p_) < sizeof v) return false;
    std::memcpy(&v, p_, sizeof v);
    p_ += sizeof v;
    return true;
  }
  bool get_str(std::string& v) {
    std::uint32_t n = 0;
    if (!get(n) || static_cast<std::size_t>(end_ - p_) < n) return false;
    v.assign(p_, n);
    p_ += n;
    return true;
  }

 private:
  const char* p_;
  const char* end_;
};

bool decode_ticket(const char* p, std::size_t n, TaskTicket& t) {
  TicketReader r(p, n);
  std::uint32_t paths = 0;
  if (!r.get(t.seq) || !r.get(t.uid) || !r.get(t.gid) || !r.get(t.slot) || !r.get(t.secret) || !r.get_str(t.endpoint) ||
      !r.get(paths) || paths > kMaxCgroupPaths) {
    return false;
  }
  t.cgroup_procs.resize(paths);
  for (std::string& path : t.cgroup_procs) {
    if (!r.get_str(path)) return false;
  }
  return r.get_str(t.key);
}

// In the new child: decode the ticket and become the task. Never returns.
[[noreturn]] void become_child(const PreparedChild& prep, const char* request, std::size_t size,
                               const int (&received)[kMaxFds]) {
  ::prctl(PR_SET_NAME, "pillbox-sandbox");  // the name of the executable, as a zygote's child had
  TaskTicket ticket;
  if (!decode_ticket(request + 1, size - 1, ticket)) _exit(kExitSetupFailed);
  const std::uint8_t mask = static_cast<std::uint8_t>(request[0]);
  ChildFds fds;
  std::size_t next = 0;
  if (mask & kHasCrash) fds.crash_write = received[next++];
  if (mask & kHasStdout) fds.stdout_fd = received[next++];
  if (mask & kHasStderr) fds.stderr_fd = received[next++];
  if (mask & kHasListenerSocket) fds.listener_socket = received[next++];
  if (mask & kHasMountNs) fds.mount_ns = received[next++];
  if (mask & kHasPayloadMemfd) fds.payload_memfd = received[next++];
  run_child(prep, ticket, fds, /*enter_own_namespaces=*/false);
}

[[noreturn]] void serve(const PreparedChild& prep, int sock) {
  // Static, not on the stack or heap: the one buffer this loop writes per
  // request, so one copy-on-write fault per fork at most.
  static char request[kMaxRequest];
  for (;;) {
    iovec iov{request, sizeof request};
    alignas(cmsghdr) char control[CMSG_SPACE(sizeof(int) * kMaxFds)];
    msghdr msg{};
    msg.msg_iov = &iov;
    msg.msg_iovlen = 1;
    msg.msg_control = control;
    msg.msg_controllen = sizeof control;
    const ssize_t n = ::recvmsg(sock, &msg, 0);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) _exit(0);  // the zygote is gone
    int received[kMaxFds] = {-1, -1, -1, -1, -1, -1};
    std::size_t count = 0;
    for (cmsghdr* c = CMSG_FIRSTHDR(&msg); c != nullptr; c = CMSG_NXTHDR(&msg, c)) {
      if (c->cmsg_level != SOL_SOCKET || c->cmsg_type != SCM_RIGHTS) continue;
      const std::size_t k = (c->cmsg_len - CMSG_LEN(0)) / sizeof(int);
      for (std::size_t i = 0; i < k; ++i) {
        int fd;
        std::memcpy(&fd, CMSG_DATA(c) + i * sizeof(int), sizeof fd);
        if (count < kMaxFds) {
          received[count++] = fd;
        } else {
          ::close(fd);
        }
      }
    }
    std::int64_t reply;
    if ((msg.msg_flags & (MSG_TRUNC | MSG_CTRUNC)) != 0 || n < 2) {
      reply = -EMSGSIZE;
    } else {
      // glibc's fork() cannot make a sibling; the raw clone can. Nothing in
      // the child relies on what glibc's fork would have reset: this process
      // is single-threaded and holds no lock here.
      const long pid = ::syscall(SYS_clone, CLONE_PARENT | SIGCHLD, 0, nullptr, nullptr, 0);
      if (pid == 0) become_child(prep, request, static_cast<std::size_t>(n), received);
      reply = pid < 0 ? -errno : pid;
    }
    for (std::size_t i = 0; i < count; ++i) ::close(received[i]);
    while (::send(sock, &reply, sizeof reply, MSG_NOSIGNAL) < 0 && errno == EINTR) {
    }
  }
}

}  // namespace

Expected<ForkServer> ForkServer::start(const PreparedChild& prep, std::initializer_list<int> close_in_server) {
  int pair[2];
  if (::socketpair(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0, pair) != 0) {
    return Error{std::string("fork server: socketpair: ") + std::strerror(errno)};
  }
  UniqueFd ours(pair[0]), theirs(pair[1]);
  const pid_t zygote = ::getpid();
  const pid_t pid = ::fork();
  if (pid < 0) return Error{std::string("fork server: fork: ") + std::strerror(errno)};
  if (pid == 0) {
    ::prctl(PR_SET_NAME, "pillbox-forksrv");  // what ps shows; children name themselves again
    ::prctl(PR_SET_PDEATHSIG, SIGKILL);
    if (::getppid() != zygote) _exit(0);
    ours.reset();
    const int devnull = ::open("/dev/null", O_RDWR | O_CLOEXEC);
    for (int fd : close_in_server) {
      if (devnull >= 0) ::dup2(devnull, fd);
    }
    if (devnull >= 0) ::close(devnull);
    serve(prep, theirs.get());
  }
  return ForkServer(std::move(ours), pid);
}

Expected<pid_t> ForkServer::fork_child(const TaskTicket& ticket, const ChildFds& fds) {
  std::string request(1, '\0');
  int send_fds[kMaxFds];
  std::size_t count = 0;
  std::uint8_t mask = 0;
  if (fds.crash_write >= 0) mask |= kHasCrash, send_fds[count++] = fds.crash_write;
  if (fds.stdout_fd >= 0) mask |= kHasStdout, send_fds[count++] = fds.stdout_fd;
  if (fds.stderr_fd >= 0) mask |= kHasStderr, send_fds[count++] = fds.stderr_fd;
  if (fds.listener_socket >= 0) mask |= kHasListenerSocket, send_fds[count++] = fds.listener_socket;
  if (fds.mount_ns >= 0) mask |= kHasMountNs, send_fds[count++] = fds.mount_ns;
  if (fds.payload_memfd >= 0) mask |= kHasPayloadMemfd, send_fds[count++] = fds.payload_memfd;
  request[0] = static_cast<char>(mask);
  if (ticket.cgroup_procs.size() > kMaxCgroupPaths) return Error{"fork server: more than 16 cgroups for one task"};
  encode_ticket(ticket, request);
  if (request.size() > kMaxRequest) return Error{"fork server: ticket too large"};

  iovec iov{request.data(), request.size()};
  alignas(cmsghdr) char control[CMSG_SPACE(sizeof(int) * kMaxFds)] = {};
  msghdr msg{};
  msg.msg_iov = &iov;
  msg.msg_iovlen = 1;
  if (count > 0) {
    msg.msg_control = control;
    msg.msg_controllen = CMSG_SPACE(sizeof(int) * count);
    cmsghdr* c = CMSG_FIRSTHDR(&msg);
    c->cmsg_level = SOL_SOCKET;
    c->cmsg_type = SCM_RIGHTS;
    c->cmsg_len = CMSG_LEN(sizeof(int) * count);
    std::memcpy(CMSG_DATA(c), send_fds, sizeof(int) * count);
  }
  ssize_t sent;
  while ((sent = ::sendmsg(sock_.get(), &msg, MSG_NOSIGNAL)) < 0 && errno == EINTR) {
  }
  if (sent < 0) {
    reachable_ = false;
    return Error{std::string("fork server unreachable: ") + std::strerror(errno)};
  }
  pollfd wait_for{sock_.get(), POLLIN, 0};
  int ready;
  while ((ready = ::poll(&wait_for, 1, kReplyTimeoutMs)) < 0 && errno == EINTR) {
  }
  if (ready == 0) {
    ::kill(pid_, SIGKILL);
    reachable_ = false;
    return Error{"fork server did not answer within " + std::to_string(kReplyTimeoutMs / 1000) +
                 " s (stopped or stuck); it was killed"};
  }
  std::int64_t reply = 0;
  ssize_t got;
  while ((got = ::recv(sock_.get(), &reply, sizeof reply, 0)) < 0 && errno == EINTR) {
  }
  if (got != static_cast<ssize_t>(sizeof reply)) {
    reachable_ = false;
    return Error{got == 0 ? std::string("fork server exited") : std::string("fork server: recv: ") + std::strerror(errno)};
  }
  if (reply < 0) return Error{std::string("fork: ") + std::strerror(static_cast<int>(-reply))};
  return static_cast<pid_t>(reply);
}

}  // namespace pillbox::sandbox
