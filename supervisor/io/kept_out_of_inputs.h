#pragma once
// The store this process has open is never read as input, nor opened
// because something hostile named it (a crash frame's module): closing any
// descriptor of the database drops this process's POSIX locks, and another
// process could then delete the WAL under a live connection (issue 25;
// docs/architecture.md, The store).
#include <sys/stat.h>

#include <optional>
#include <string>
#include <vector>

#include "shared/unique_fd.h"

namespace pillbox {

// Keeps `dir` (checked as it is now: device and inode) and the files
// `names` in it (checked when asked, as they are then: a WAL comes and goes)
// out of every input. `what` says what they are, in messages ("the pillbox
// store /x this process writes"). Thread-safe.
void keep_out_of_inputs(const std::string& dir, const std::vector<std::string>& names, const std::string& what);

// What `st` (of a directory or a file about to be opened) is when it is one
// of those, else nullopt.
std::optional<std::string> kept_out_of_inputs(const struct stat& st);

// Opens `path` (following symlinks) read-only, non-blocking, only when it is
// a regular file and not kept out: first as O_PATH (whose close drops no
// lock), checked by fstat, then reopened through /proc/self/fd, so nothing
// can be swapped in between. On refusal the fd is invalid and `st` says what
// was there (st_mode 0 when nothing could be opened).
UniqueFd open_regular_unless_kept_out(const std::string& path, struct stat& st);

}  // namespace pillbox
