#pragma once
// The one loop that reads a whole regular file through a file descriptor,
// for the supervisor (supervisor/io/regular_file.h words its failures) and
// for the policy parser here in shared/ (which words its own): so that both
// refuse at once what is not a regular file, never block on a FIFO, and
// count their cap on the bytes read, whatever size the file claims (/proc
// files claim 0 bytes; a growing file claims less than it has).
#include <sys/types.h>

#include <cstdint>
#include <string>

#include "shared/unique_fd.h"

namespace pillbox {

// Opens `path` (relative to `dir_fd`, or AT_FDCWD) read-only with O_NONBLOCK
// — a FIFO opens at once instead of waiting for a writer — and `extra_flags`
// (O_NOFOLLOW: a symlink as the last component is refused with ELOOP). On
// failure the fd is invalid and errno says why.
UniqueFd open_for_reading_at(int dir_fd, const std::string& path, int extra_flags);

// A whole file, or why not: the cause alone, for each caller to word.
struct RegularFileRead {
  enum class Failure : std::uint8_t {
    kNone,
    kSystem,      // fstat or read failed: `error` is the errno
    kNotRegular,  // `mode` is the file's st_mode
    kTooLarge,    // more than the cap
  };
  Failure failure = Failure::kNone;
  int error = 0;
  mode_t mode = 0;
  std::string bytes;  // the whole file when failure is kNone
};

// The file open at `fd` (not closed here), if it is a regular file of at
// most `cap` bytes.
RegularFileRead read_whole_regular_fd(int fd, std::uint64_t cap);

}  // namespace pillbox
