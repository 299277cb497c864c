#include "shared/regular_file_read.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>

namespace pillbox {

UniqueFd open_for_reading_at(int dir_fd, const std::string& path, int extra_flags) {
  return UniqueFd(::openat(dir_fd, path.c_str(), O_RDONLY | O_CLOEXEC | O_NONBLOCK | O_NOCTTY | extra_flags));
}

RegularFileRead read_whole_regular_fd(int fd, std::uint64_t cap) {
  RegularFileRead read;
  // A failure keeps no bytes.
  auto failed = [&read](RegularFileRead::Failure failure, int error = 0) {
    read.failure = failure;
    read.error = error;
    read.bytes.clear();
    return read;
  };
  struct stat st {};
  if (::fstat(fd, &st) != 0) return failed(RegularFileRead::Failure::kSystem, errno);
  if (!S_ISREG(st.st_mode)) {
    read.mode = st.st_mode;
    return failed(RegularFileRead::Failure::kNotRegular);
  }
  // st_size is a hint for the allocation only: the cap holds on the bytes
  // actually read, one chunk past it at most.
  if (static_cast<std::uint64_t>(st.st_size) > cap) return failed(RegularFileRead::Failure::kTooLarge);
  read.bytes.reserve(static_cast<std::size_t>(st.st_size));
  char buf[65536];
  for (;;) {
    const ssize_t n = ::read(fd, buf, sizeof buf);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) return failed(RegularFileRead::Failure::kSystem, errno);
    if (n == 0) return read;
    if (read.bytes.size() + static_cast<std::size_t>(n) > cap) return failed(RegularFileRead::Failure::kTooLarge);
    read.bytes.append(buf, static_cast<std::size_t>(n));
  }
}

}  // namespace pillbox
