#include "supervisor/io/private_file.h"

#include <fcntl.h>
#include <unistd.h>

#include "supervisor/io/regular_file.h"

namespace pillbox {

Status write_file_whole(const std::string& path, const std::string& temp_path, std::string_view bytes) {
  // A temp file left by a writer killed mid-way (its pid reused since) would
  // stop O_EXCL; it is ours to remove: the directory is private.
  ::unlink(temp_path.c_str());
  if (auto s = write_file_whole_at(AT_FDCWD, path, temp_path, bytes, 0600); !s) {
    return Status::error("cannot write " + path + ": " + s.message());
  }
  return Status::ok();
}

Expected<std::string> read_private_file(const std::string& path, std::uint64_t cap) {
  auto bytes = read_regular_file_at(AT_FDCWD, path, O_NOFOLLOW, cap);
  if (!bytes) return Error{"cannot read " + path + ": " + bytes.error()};
  return bytes;
}

}  // namespace pillbox
