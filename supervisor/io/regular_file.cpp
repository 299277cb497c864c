#include "supervisor/io/regular_file.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>

#include "shared/control.h"

namespace pillbox {

std::string file_type_text(mode_t mode) {
  switch (mode & S_IFMT) {
    case S_IFREG: return "a regular file";
    case S_IFDIR: return "a directory";
    case S_IFLNK: return "a symlink";
    case S_IFIFO: return "a FIFO";
    case S_IFSOCK: return "a socket";
    case S_IFCHR: return "a character device";
    case S_IFBLK: return "a block device";
    default: return "a file of unknown type";
  }
}

std::string size_text(std::uint64_t bytes) {
  if (bytes >= (1ull << 30) && bytes % (1ull << 30) == 0) return std::to_string(bytes >> 30) + " GiB";
  if (bytes >= (1ull << 20) && bytes % (1ull << 20) == 0) return std::to_string(bytes >> 20) + " MiB";
  if (bytes >= (1ull << 10) && bytes % (1ull << 10) == 0) return std::to_string(bytes >> 10) + " KiB";
  return std::to_string(bytes) + (bytes == 1 ? " byte" : " bytes");
}

Expected<std::string> read_regular_fd(int fd, std::uint64_t cap) {
  struct stat st {};
  if (::fstat(fd, &st) != 0) return Error{std::strerror(errno)};
  if (!S_ISREG(st.st_mode)) return Error{file_type_text(st.st_mode) + ", not a regular file"};
  const std::string too_large = "larger than the " + size_text(cap) + " limit";
  // st_size is a hint for the allocation only: the cap holds on the bytes
  // actually read, one chunk past it at most.
  if (static_cast<std::uint64_t>(st.st_size) > cap) return Error{too_large};
  std::string data;
  data.reserve(static_cast<std::size_t>(st.st_size));
  char buf[65536];
  for (;;) {
    const ssize_t n = ::read(fd, buf, sizeof buf);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) return Error{std::strerror(errno)};
    if (n == 0) return data;
    if (data.size() + static_cast<std::size_t>(n) > cap) return Error{too_large};
    data.append(buf, static_cast<std::size_t>(n));
  }
}

UniqueFd open_for_reading_at(int dir_fd, const std::string& path, int extra_flags) {
  return UniqueFd(::openat(dir_fd, path.c_str(), O_RDONLY | O_CLOEXEC | O_NONBLOCK | O_NOCTTY | extra_flags));
}

Expected<std::string> read_regular_file_at(int dir_fd, const std::string& path, int extra_flags, std::uint64_t cap) {
  UniqueFd fd = open_for_reading_at(dir_fd, path, extra_flags);
  if (!fd.valid()) return Error{std::strerror(errno)};
  return read_regular_fd(fd.get(), cap);
}

Status write_file_whole_at(int dir_fd, const std::string& name, const std::string& temp_name, std::string_view bytes,
                           mode_t mode) {
  UniqueFd fd(::openat(dir_fd, temp_name.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, mode));
  if (!fd.valid()) return Status::error(std::strerror(errno));
  Status written = ::fchmod(fd.get(), mode) == 0 ? write_all(fd.get(), bytes)
                                                  : Status::error(std::string("chmod: ") + std::strerror(errno));
  if (written && ::close(fd.release()) != 0) written = Status::error(std::strerror(errno));
  if (written && ::renameat(dir_fd, temp_name.c_str(), dir_fd, name.c_str()) != 0) {
    written = Status::error(std::strerror(errno));
  }
  if (!written) ::unlinkat(dir_fd, temp_name.c_str(), 0);
  return written;
}

}  // namespace pillbox
