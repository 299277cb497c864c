#pragma once
// Before an exec run starts as root: can the task's uid run the command?
// Tasks drop to a uid of the uid_pool, so a command only root can reach
// (/root/bin, a pyenv shim under /root) would fail in every task and be
// charged to good payloads. The run checks first, as such a uid: the
// command, its #! interpreter chain (`#!/usr/bin/env NAME` in the task's
// PATH), what a script's `exec` line runs (version-manager shims), and the
// paths its arguments name; and refuses to start (exit 3) saying what is
// missing where.
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

// Both, for an exec config, with the policy's shares: the one call the run
// makes. Without a privilege drop only what does not exist is an error. The
// crash library is not checked: tasks get one they can preload
// (crash_library_copy.h).
Status check_command_access(const ChildConfig& config, std::uint32_t uid, std::uint32_t gid);

}  // namespace pillbox
