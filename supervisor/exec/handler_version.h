#pragma once
// Which version of an exec handler runs: what the scripts its command line
// names hold. The identity (handler_identity, dispatcher.h) names what runs
// and decides fingerprints and ledger; the version tells whether a task done
// earlier ran the code there now (issue 26, point 2): an edit is a new
// version, and fingerprints outlive unrelated edits.
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

// How a handler's identity names a host path its command line names
// (`path` absolute), the same from any working directory: in a checkout
// (.git, .hg, .svn or .jj above it), its path from the checkout's root, so a
// clone elsewhere keeps its fingerprints; else its canonical path.
std::string host_path_identity(const std::string& path);

// The scripts: the program itself when it is a script (starts with "#!"),
// and every argument that names a regular file of the host, each read in
// full up to kMaxVersionedBytes (a larger one counts by size and mtime).
HandlerVersion handler_version(const ChildConfig& config);

inline constexpr std::uint64_t kMaxVersionedBytes = 64ull << 20;

}  // namespace pillbox
