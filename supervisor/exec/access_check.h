#pragma once
// Before an exec run starts as root: can the task's uid run the command?
//
// As root, tasks never run as root: each job slot's children drop to an
// unprivileged uid of the policy's uid_pool. A command installed where only
// root may go (/root/bin, a 0700 home, a version manager's shim that execs a
// binary under /root/.pyenv) then fails inside every task, the same way for
// every payload, and would be charged to good payloads (a non-zero exit is
// a handler-error). So the run checks first, as such a uid, that it can
//   - execute the command (and read it, when it is a script),
//   - execute the interpreter chain of a script (#!, including
//     `#!/usr/bin/env NAME`, looked up in the task's PATH),
//   - execute what a script's `exec` line runs (how pyenv, rbenv and asdf
//     shims hand over to the real program),
//   - read the files and enter the directories its arguments name,
// and refuses to start (a setup error, exit 3) with a message that says
// which permission is missing where, and why tasks do not run as root.
#include <cstdint>
#include <string>
#include <vector>

#include "shared/child_config.h"
#include "shared/status.h"

namespace pillbox {

// What the task's uid must be allowed to do with one path, and why it needs to.
struct AccessNeed {
  std::string path;
  int mode = 0;      // R_OK and/or X_OK; 0: it does not exist at all (`what` says where it was looked for)
  std::string what;  // "the command", "the interpreter of /x/run.sh", "argument 2", ...
};

// The needs of an exec command line, found as the caller (root) sees the
// file system. `task_path` is the PATH exec programs get.
std::vector<AccessNeed> command_access_needs(const std::vector<std::string>& argv, const std::string& task_path);

// Checks `needs` in a child that has dropped to uid/gid (no supplementary
// groups). Ok, or the first need that uid is refused, explained.
Status check_access_as(const std::vector<AccessNeed>& needs, std::uint32_t uid, std::uint32_t gid);

// Why `uid`/`gid` cannot get `mode` on `path`: the first directory it cannot
// enter, or the file's own mode ("directory /root is mode 0700, owner root").
std::string explain_denial(const std::string& path, int mode, std::uint32_t uid, std::uint32_t gid);

// Both, for an exec config, with what the policy shares with tasks: the one
// call the run makes. Without root (no privilege drop) only what does not
// exist at all is an error. The crash library is not looked at: the run
// gives tasks one they can preload (crash_library_copy.h).
Status check_command_access(const ChildConfig& config, std::uint32_t uid, std::uint32_t gid);

}  // namespace pillbox
