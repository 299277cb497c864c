#pragma once
// The input files of `run`, `fuzz` (seeds) and `quarantine import`. Only
// regular files are read, capped, never with a blocking open (a FIFO would
// hang pillbox). A named path's symlink is followed (the user chose it);
// below a named directory nothing is followed unless --follow-symlinks,
// neither when listing nor when reading later, component by component, so a
// symlink swapped in between is refused. Entries that are not regular files
// are listed as skipped, never dropped.
#include <cstdint>
#include <string>
#include <vector>

#include "shared/status.h"

namespace pillbox {

enum class SymlinksInTree {
  kRefuse,  // a symlink below a named directory is listed as skipped (the default)
  kFollow,  // --follow-symlinks: followed anywhere; a directory reached twice is read once
};

struct InputEntry {
  // As the user knows it, and the task key: the named path, then the path
  // below it ("inputs/a/b.txt"), as std::filesystem::path joins them.
  std::string path;
  // path[0, named_length) is what the user named; below it, each component
  // is opened without following a symlink unless `symlinks` is kFollow.
  std::size_t named_length = 0;
  SymlinksInTree symlinks = SymlinksInTree::kRefuse;
  // Empty for a regular file. Otherwise it is not read, and this says what it
  // is: "a FIFO, not a regular file", "a symlink, not followed (...)".
  std::string skipped;
};

// A named path: one entry for a regular file; for a directory, every entry
// below it, recursively, sorted, skipped ones included. Errors, one line
// naming the path: unreadable, or neither a regular file nor a directory
// (decided by stat, so a device is never opened).
Expected<std::vector<InputEntry>> list_input(const std::string& named, SymlinksInTree symlinks);

// The bytes of a listed regular file, at most `cap` (counted as read). One
// that became anything else since it was listed is an error, not a hang:
// "cannot read input 'PATH': why".
Expected<std::string> read_input(const InputEntry& entry, std::uint64_t cap);

}  // namespace pillbox
