#pragma once
// The input files of `run`, `fuzz` (seeds) and `quarantine import`
// (artifacts): the paths the user named, and what the directories among
// them hold. Only regular files are read, each with a cap on the bytes
// actually read, and never with a blocking open (a FIFO would hang pillbox).
//
// A path named on the command line is taken as named: a symlink there is
// followed, since the user chose it. Below a named directory nothing is
// followed unless asked (--follow-symlinks): not when the tree is listed,
// and not when a file is read later, component by component, so a symlink
// swapped in between (a file or a directory above it) is refused too. Every
// entry that is not a regular file is listed with what it is, never dropped.
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

// A path named on the command line: one entry for a regular file (or a
// symlink to one); for a directory, every entry below it (recursively, sorted
// by path), skipped ones included. Errors, one line naming the path: it
// cannot be read, or it is neither a regular file nor a directory ("input
// '/dev/zero' is a character device, not a regular file (...)") — said
// before anything is opened, so a device is never opened at all.
Expected<std::vector<InputEntry>> list_input(const std::string& named, SymlinksInTree symlinks);

// The bytes of a listed regular file, at most `cap` (counted as read). A
// file that has become anything else since it was listed — a FIFO, a device,
// a symlink below the named directory — is an error, not a hang. Errors:
// "cannot read input 'PATH': why".
Expected<std::string> read_input(const InputEntry& entry, std::uint64_t cap);

}  // namespace pillbox
