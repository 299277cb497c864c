#pragma once
// Files and directories this process never reads as input (list_input,
// read_input in input_files.h), nor opens because something hostile named
// them (a crash frame's module: supervisor/classify/symbolizer.cpp): the
// store it has open. Reading the store's
// database as a payload means opening and closing a descriptor of it, and
// closing any descriptor of a file drops every POSIX lock this process holds
// on it, SQLite's included: another process's reader would then delete the
// WAL under this one's connection (issue 25). `pillbox run ~/.local/state`
// or `pillbox run STORE/pillbox.db` must not do that.
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
// a regular file and not kept out: first as O_PATH, whose close drops no
// lock (the kernel skips the POSIX-lock release for O_PATH files), checked
// by fstat, then reopened through /proc/self/fd. So a path a hostile child
// names (a crash frame's module) cannot be swapped, between a check and the
// open, for the store's database. On refusal the fd is invalid and `st`
// says what was there (st_mode 0 when nothing could be opened).
UniqueFd open_regular_unless_kept_out(const std::string& path, struct stat& st);

}  // namespace pillbox
