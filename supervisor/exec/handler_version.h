#pragma once
// Which version of an exec handler runs: what the scripts its command line
// names hold. The handler's identity (handler_identity, dispatcher.h) is
// what runs, by name, and decides fingerprints and which ledger a task is
// in; its version is what those names held when the task ran, and decides
// whether a task done earlier was done by the code there now (issue 26,
// point 2: an edit is a new version; a fingerprint outlives unrelated edits).
#include <string>
#include <vector>

#include "shared/child_config.h"

namespace pillbox {

struct HandlerVersion {
  // "" when the command names no script (a program of the system only):
  // nothing to version. Else 16 hex digits of a SHA-256 over each script's
  // name and content.
  std::string id;
  std::vector<std::string> scripts;  // their file names, for messages
};

// How a handler's identity names a file or directory of the host that its
// command line names (`path` absolute): the same from any working
// directory. In a checkout (the nearest directory above it holding .git,
// .hg, .svn or .jj), its path from the checkout's root, so that a clone at
// another place keeps its fingerprints; elsewhere, its canonical absolute
// path (two programs' main.py in two folders are two handlers).
std::string host_path_identity(const std::string& path);

// The scripts: the program itself when it is a script (starts with "#!"),
// and every argument that names a regular file of the host, each read in
// full up to kMaxVersionedBytes (a larger one counts by size and mtime).
HandlerVersion handler_version(const ChildConfig& config);

inline constexpr std::uint64_t kMaxVersionedBytes = 64ull << 20;

}  // namespace pillbox
