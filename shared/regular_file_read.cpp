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
  struct stat st {};
  if (::fstat(fd, &st) != 0) {
    read.failure = RegularFileRead::Failure::kSystem;
    read.error = errno;
    return read;
  }
  if (!S_ISREG(st.st_mode)) {
    read.failure = RegularFileRead::Failure::kNotRegular;
    read.mode = st.st_mode;
    return read;
  }
  // st_size is a hint for the allocation only: the cap holds on the bytes
  // actually read, one chunk past it at most.
  if (static_cast<std::uint64_t>(st.st_size) > cap) {
    read.failure = RegularFileRead::Failure::kTooLarge;
    return read;
  }
  read.bytes.reserve(static_cast<std::size_t>(st.st_size));
  char buf[65536];
  for (;;) {
    const ssize_t n = ::read(fd, buf, sizeof buf);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) {
      read.failure = RegularFileRead::Failure::kSystem;
      read.error = errno;
      read.bytes.clear();
      return read;
    }
    if (n == 0) return read;
    if (read.bytes.size() + static_cast<std::size_t>(n) > cap) {
      read.failure = RegularFileRead::Failure::kTooLarge;
      read.bytes.clear();
      return read;
    }
    read.bytes.append(buf, static_cast<std::size_t>(n));
  }
}

}  // namespace pillbox
