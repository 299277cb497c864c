#include "shared/uid_sweep.h"

#include <fcntl.h>
#include <signal.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include "shared/unique_fd.h"

namespace pillbox {
namespace {

struct Dirent64 {
  std::uint64_t ino;
  std::int64_t off;
  unsigned short reclen;
  unsigned char type;
  char name[];
};

// "<pid>/status" of /proc, read through `proc` (an fd of /proc). False when
// it cannot be read (the process is gone).
bool read_status(int proc, const char* pid, char* buf, std::size_t size) {
  char path[64];
  const std::size_t n = std::strlen(pid);
  if (n + sizeof "/status" > sizeof path) return false;
  std::memcpy(path, pid, n);
  std::memcpy(path + n, "/status", sizeof "/status");
  const UniqueFd fd(::openat(proc, path, O_RDONLY | O_CLOEXEC));
  if (!fd.valid()) return false;
  std::size_t used = 0;
  while (used + 1 < size) {
    const ssize_t r = ::read(fd.get(), buf + used, size - 1 - used);
    if (r < 0 && errno == EINTR) continue;
    if (r <= 0) break;
    used += static_cast<std::size_t>(r);
  }
  buf[used] = '\0';
  return used > 0;
}

// The value after "\n<key>" in a status text, or nullptr.
const char* field(const char* status, const char* key) {
  const char* at = std::strstr(status, key);
  return at == nullptr ? nullptr : at + std::strlen(key);
}

// The state letter of a status text (R, S, D, T, Z, X, ...), '?' when absent.
char state_of(const char* status) {
  const char* state = field(status, "\nState:");
  while (state != nullptr && (*state == ' ' || *state == '\t')) ++state;
  return state == nullptr || *state == '\0' ? '?' : *state;
}

// True when the status is of a process that runs as one of `uids`: its real,
// effective or saved uid (the "Uid:" line's first three).
bool has_uid(const char* status, const std::uint32_t* uids, std::size_t count) {
  const char* p = field(status, "\nUid:");
  if (p == nullptr) return false;
  for (int i = 0; i < 3; ++i) {
    while (*p == ' ' || *p == '\t') ++p;
    if (*p < '0' || *p > '9') return false;
    std::uint64_t id = 0;
    while (*p >= '0' && *p <= '9') id = id * 10 + static_cast<std::uint64_t>(*p++ - '0');
    for (std::size_t k = 0; k < count; ++k) {
      if (id == uids[k]) return true;
    }
  }
  return false;
}

// True when the status is of a live process (not a zombie) that runs as one of `uids`.
bool runs_as(const char* status, const std::uint32_t* uids, std::size_t count) {
  const char state = state_of(status);
  return state != '?' && state != 'Z' && state != 'X' && has_uid(status, uids, count);
}

// Calls `visit(fd of /proc, the pid's directory name, the pid)` for every
// process directory of /proc.
template <typename Visit>
void for_each_pid(Visit visit) {
  const UniqueFd proc(::open("/proc", O_RDONLY | O_DIRECTORY | O_CLOEXEC));
  if (!proc.valid()) return;
  alignas(8) char dents[16384];
  for (;;) {
    const long n = ::syscall(SYS_getdents64, proc.get(), dents, sizeof dents);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) break;
    for (long at = 0; at < n;) {
      const auto* d = reinterpret_cast<const Dirent64*>(dents + at);
      at += d->reclen;
      long pid = 0;
      const char* c = d->name;
      for (; *c >= '0' && *c <= '9'; ++c) pid = pid * 10 + (*c - '0');
      if (c == d->name || *c != '\0' || pid <= 0) continue;
      visit(proc.get(), d->name, static_cast<pid_t>(pid));
    }
  }
}

// One pass over /proc; returns how many processes it signalled.
int one_pass(const std::uint32_t* uids, std::size_t count) {
  int signalled = 0;
  char status[4096];
  for_each_pid([&](int proc, const char* name, pid_t pid) {
    if (!read_status(proc, name, status, sizeof status) || !runs_as(status, uids, count)) return;
    // Pin the process, then look again: if the pid was recycled in
    // between, the pidfd names the new process, whose uid is read now.
    const UniqueFd pidfd(static_cast<int>(::syscall(SYS_pidfd_open, pid, 0)));
    if (!pidfd.valid()) return;
    if (read_status(proc, name, status, sizeof status) && runs_as(status, uids, count) &&
        ::syscall(SYS_pidfd_send_signal, pidfd.get(), SIGKILL, nullptr, 0) == 0) {
      ++signalled;
    }
  });
  return signalled;
}

}  // namespace

int sweep_uids(const std::uint32_t* uids, std::size_t count, int max_passes, bool* clear) {
  int total = 0;
  bool none = count == 0;
  for (int pass = 0; pass < max_passes && !none; ++pass) {
    const int n = one_pass(uids, count);
    total += n;
    none = n == 0;
    if (!none) {
      const timespec pause{0, 1'000'000};
      ::nanosleep(&pause, nullptr);
    }
  }
  if (clear != nullptr) *clear = none;
  return total;
}

int count_zombies_of(std::uint32_t uid) {
  int zombies = 0;
  char status[4096];
  for_each_pid([&](int proc, const char* name, pid_t) {
    if (read_status(proc, name, status, sizeof status) && state_of(status) == 'Z' && has_uid(status, &uid, 1)) {
      ++zombies;
    }
  });
  return zombies;
}

}  // namespace pillbox
