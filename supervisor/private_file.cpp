#include "supervisor/private_file.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include "shared/control.h"
#include "shared/unique_fd.h"

namespace pillbox {

Status write_file_whole(const std::string& path, const std::string& temp_path, std::string_view bytes) {
  UniqueFd fd(::open(temp_path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC | O_NOFOLLOW, 0600));
  if (!fd.valid()) return Status::error("cannot write " + temp_path + ": " + std::strerror(errno));
  if (auto s = write_all(fd.get(), bytes); !s) {
    ::unlink(temp_path.c_str());
    return Status::error("cannot write " + temp_path + ": " + s.message());
  }
  if (::close(fd.release()) != 0 || ::rename(temp_path.c_str(), path.c_str()) != 0) {
    const std::string why = std::strerror(errno);
    ::unlink(temp_path.c_str());
    return Status::error("cannot write " + path + ": " + why);
  }
  return Status::ok();
}

Expected<std::string> read_private_file(const std::string& path, std::uint64_t cap) {
  UniqueFd fd(::open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NOFOLLOW | O_NONBLOCK));
  if (!fd.valid()) return Error{"cannot read " + path + ": " + std::strerror(errno)};
  struct stat st {};
  if (::fstat(fd.get(), &st) != 0 || !S_ISREG(st.st_mode) || static_cast<std::uint64_t>(st.st_size) > cap) {
    return Error{"cannot read " + path + ": not a regular file of at most " + std::to_string(cap) + " bytes"};
  }
  std::string out(static_cast<std::size_t>(st.st_size), '\0');
  std::size_t done = 0;
  while (done < out.size()) {
    const ssize_t n = ::pread(fd.get(), out.data() + done, out.size() - done, static_cast<off_t>(done));
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) return Error{"cannot read " + path + ": " + std::strerror(errno)};
    if (n == 0) break;  // truncated meanwhile: what is there
    done += static_cast<std::size_t>(n);
  }
  out.resize(done);
  return out;
}

}  // namespace pillbox
