#pragma once
// Files pillbox writes for itself and reads back later (payload files of the
// store, the fuzz in-flight journal): written whole or not at all, read only
// as the regular files they were written as.
#include <cstdint>
#include <string>
#include <string_view>

#include "shared/status.h"

namespace pillbox {

// Writes `bytes` to `temp_path` (0600, never through a symlink; a killed
// writer's leftover is replaced), then renames it to `path`: readers see the
// whole file or none. REQUIRES: both in one directory only pillbox writes
// to (else write_file_whole_at, regular_file.h). Errors name the file.
Status write_file_whole(const std::string& path, const std::string& temp_path, std::string_view bytes);

// The bytes of `path`, a regular file of at most `cap` bytes (counted as
// read, not as its size claims), opened without following a symlink and
// without blocking on a FIFO. Errors name the file.
Expected<std::string> read_private_file(const std::string& path, std::uint64_t cap);

}  // namespace pillbox
