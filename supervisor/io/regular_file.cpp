#include "supervisor/io/regular_file.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <utility>

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
  using Failure = RegularFileRead::Failure;
  RegularFileRead read = read_whole_regular_fd(fd, cap);
  if (read.failure == Failure::kNone) return std::move(read.bytes);
  if (read.failure == Failure::kSystem) return Error{std::strerror(read.error)};
  if (read.failure == Failure::kNotRegular) return Error{file_type_text(read.mode) + ", not a regular file"};
  return Error{"larger than the " + size_text(cap) + " limit"};
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
