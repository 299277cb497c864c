#pragma once
// Whole regular files, through file descriptors so that what is checked is
// what is used. A read (shared/regular_file_read.h) never blocks on a FIFO,
// never reads a device, and stops at its cap whatever size the file claims
// (/proc files claim 0). A write goes to a new file renamed over the final
// name, so no planted symlink or hard link is written through.
// Errors are the reason alone: each caller names the file its own way.
#include <sys/types.h>

#include <cstdint>
#include <string>
#include <string_view>

#include "shared/regular_file_read.h"
#include "shared/status.h"
#include "shared/unique_fd.h"

namespace pillbox {

// What a file of this st_mode is, with its article: "a regular file",
// "a directory", "a symlink", "a FIFO", "a socket", "a character device",
// "a block device".
std::string file_type_text(mode_t mode);

// "1 GiB", "64 KiB", "1000 bytes": a cap as a user reads it.
std::string size_text(std::uint64_t bytes);

// open_for_reading_at, then the whole file if it is a regular file. More
// than `cap` bytes is an error ("larger than the 1 GiB limit").
Expected<std::string> read_regular_file_at(int dir_fd, const std::string& path, int extra_flags, std::uint64_t cap);

// The same for a file already open at `fd` (not closed here).
Expected<std::string> read_regular_fd(int fd, std::uint64_t cap);

// Creates `temp_name` in `dir_fd` with O_CREAT | O_EXCL | O_NOFOLLOW (so
// anything already there is an error, never written through), mode exactly
// `mode` (no umask), writes `bytes` and renames it to `name`, replacing a
// file or symlink there but not a directory. On error the temp file is
// removed. Both names may be relative to `dir_fd`.
Status write_file_whole_at(int dir_fd, const std::string& name, const std::string& temp_name, std::string_view bytes,
                           mode_t mode);

}  // namespace pillbox
