#pragma once
// What of the host an exec task sees where its command line points: checked
// before a run, and used to read a failure that names a path.
// With a private tmp, a task's /tmp, /var/tmp and /dev/shm are its own empty
// tmpfs (sandbox/private_tmp.h) holding only what is bound there: existing
// paths the command line names (keep_visible), the shares and the writable
// paths. Anything else of the host there is hidden, never a payload's fault.
#include <cstddef>
#include <string>
#include <vector>

#include "shared/child_config.h"
#include "shared/policy.h"
#include "shared/status.h"
#include "supervisor/classify/outcome.h"

namespace pillbox {

// True when tasks under `policy` get private /tmp, /var/tmp and /dev/shm.
bool has_private_tmp(const Policy& policy);

// The private directory (/tmp, /var/tmp, /dev/shm) `path` lies under, or "".
std::string private_dir_of(const std::string& path);

// The absolute paths inside one argument: itself, the part after an
// option's '=', and each absolute word of a shell command string (sh -c
// "cd /tmp/tt && ./run"); a quoted path may hold spaces. Existence is not
// checked.
std::vector<std::string> absolute_words(const std::string& argument);

// `path` (under a private directory) is, or lies inside, something bound
// into the task's view.
bool bound_into_view(const ChildConfig& config, const std::string& path);

// Before a run: each shared path exists, and the command line names no
// missing path under a private directory whose directory the host has
// (/tmp/results/out.txt with /tmp/results the host's): the task would read
// or write its own empty /tmp instead. Refused with a message naming
// --share and --writable. A path without a host directory is the task's
// scratch space (/tmp/x.txt), and fine.
Status check_host_view(const ChildConfig& config);

// After a failure whose `message` (a child's claim) says "No such file or
// directory": its first absolute path under a private directory that exists
// here and is not bound into the view; "" when none. The message only says
// where to look; existence and the view are this host's word.
std::string hidden_host_path(const ChildConfig& config, const std::string& message);
// The same for a failure: its message and the tail of its stderr.
std::string hidden_host_path(const ChildConfig& config, const Outcome& failure);

// Why a failure is not its payload's: "a task could not see HIDDEN, which
// this host has (KIND FINGERPRINT: first line of its message): under /tmp,
// tasks see their own empty directory and only what is shared with them".
std::string why_hidden(const std::string& hidden, const Outcome& failure);

// The directory to --share so tasks see `hidden`: its deepest existing
// directory below the private one (/tmp/tt for /tmp/tt/data.txt).
std::string share_for(const std::string& hidden);

}  // namespace pillbox
