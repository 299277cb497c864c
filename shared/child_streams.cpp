#include "shared/child_streams.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include "shared/crash_report.h"
#include "shared/seccomp_notify.h"

namespace pillbox {
namespace {

std::string errno_text(const char* what) { return std::string(what) + ": " + std::strerror(errno); }

// Reads [offset, offset+len) of a file descriptor without moving its offset.
std::string read_range(int fd, std::uint64_t offset, std::size_t len) {
  std::string out(len, '\0');
  std::size_t got = 0;
  while (got < len) {
    const ssize_t n = ::pread(fd, out.data() + got, len - got, static_cast<off_t>(offset + got));
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) break;
    got += static_cast<std::size_t>(n);
  }
  out.resize(got);
  return out;
}

}  // namespace

Expected<ChildStreams> open_child_streams(bool exec_mode) {
  ChildStreams s;
  int p[2];
  if (::pipe2(p, O_CLOEXEC | O_NONBLOCK) != 0) return Error{errno_text("pipe2 (crash pipe)")};
  s.crash_read.reset(p[0]);
  s.crash_write.reset(p[1]);
  auto listener = listener_socketpair();
  if (!listener) return Error{listener.error()};
  s.listener_socket = std::move(listener->first);
  s.listener_socket_child = std::move(listener->second);
  if (exec_mode) {
    s.stdout_file.reset(::memfd_create("pillbox-stdout", MFD_CLOEXEC));
    if (!s.stdout_file.valid()) return Error{errno_text("memfd_create (stdout)")};
    s.stderr_file.reset(::memfd_create("pillbox-stderr", MFD_CLOEXEC));
    if (!s.stderr_file.valid()) return Error{errno_text("memfd_create (stderr)")};
  }
  return s;
}

void collect_child_streams(ChildStreams& s, ExitReport& report, std::size_t output_cap) {
  // Several processes may share the pipe (a child and its descendants); keep
  // at most a few reports' worth.
  const std::size_t crash_cap = 4 * kMaxCrashReportBytes;
  char buf[16384];
  while (s.crash_read.valid() && report.crash.size() < crash_cap) {
    const ssize_t n = ::read(s.crash_read.get(), buf, sizeof buf);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) break;
    report.crash.append(buf, std::min(static_cast<std::size_t>(n), crash_cap - report.crash.size()));
  }
  if (s.stdout_file.valid()) {
    struct stat st {};
    if (::fstat(s.stdout_file.get(), &st) == 0) {
      report.stdout_size = static_cast<std::uint64_t>(st.st_size);
      const std::size_t want = std::min<std::uint64_t>(report.stdout_size, output_cap + 1);
      report.stdout_data = read_range(s.stdout_file.get(), 0, want);
    }
  }
  if (s.stderr_file.valid()) {
    struct stat st {};
    if (::fstat(s.stderr_file.get(), &st) == 0 && st.st_size > 0) {
      const auto size = static_cast<std::uint64_t>(st.st_size);
      const std::uint64_t from = size > kStderrTailBytes ? size - kStderrTailBytes : 0;
      report.stderr_tail = read_range(s.stderr_file.get(), from, static_cast<std::size_t>(size - from));
    }
  }
}

}  // namespace pillbox
