#pragma once
// What of the host an exec task sees where its command line points, decided
// on the supervisor's side before anything runs, and afterwards to read a
// failure that names a path.
//
// With a private tmp (policy `filesystem = read-only` and `tmp = SIZE`) a
// task's /tmp, /var/tmp and /dev/shm are its own empty tmpfs mounts
// (sandbox/private_tmp.h). Of the host's, it sees only what is bound there:
// what the command line names that exists (keep_visible), what the policy
// shares (`share`, --share) read-only, and its writable paths. Anything else
// of the host there is hidden from it, which is never a payload's fault.
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

// The absolute paths inside one argument: the argument itself when it is
// one, the part after '=' of an option (--config=/etc/x), and each
// absolute word of a shell's command string (sh -c "cd /tmp/tt && ./run"):
// a '/' at the start or after a space, a quote, '=', ':' or a shell
// operator, up to the next space, quote or operator (after a quote: up to
// the closing one, spaces included). Whether they exist is
// not looked at.
std::vector<std::string> absolute_words(const std::string& argument);

// What the task sees of the host under its private directories (above):
// `path` is, or lies inside, something bound there. Only meaningful for a
// path under one of them.
bool bound_into_view(const ChildConfig& config, const std::string& path);

// Before a run: each shared path exists. And for an exec command, a path
// the command line names under a private
// directory, which does not exist on the host, but whose directory does
// (/tmp/results/out.txt, /tmp/results being the host's): the task would see
// its own empty /tmp there, and what it reads or writes would not be the
// host's. Refused (a setup error) with a message that names --share and
// --writable. A path the host has no directory for is the task's own
// scratch space (/tmp/x.txt, /tmp/new/y), and fine.
Status check_host_view(const ChildConfig& config);

// After a failure whose `message` (a child's stderr: a claim) says "No such
// file or directory": the first absolute path in it that lies under a
// private directory, exists on this host, and is not bound into the task's
// view: a file the task could not see. "" when
// there is none. The caller weighs it: the path's existence and the view
// are this host's and the policy's word; the message is only where to look.
std::string hidden_host_path(const ChildConfig& config, const std::string& message);
// The same for a failure: its message and the tail of its stderr.
std::string hidden_host_path(const ChildConfig& config, const Outcome& failure);

// Why a failure is not its payload's: "a task could not see HIDDEN, which
// this host has (KIND FINGERPRINT: first line of its message): under /tmp,
// tasks see their own empty directory and only what is shared with them".
std::string why_hidden(const std::string& hidden, const Outcome& failure);

// The directory to name with --share so that tasks see `hidden`: the
// deepest existing directory of the host that holds it, below its private
// directory (/tmp/tt for /tmp/tt/data.txt).
std::string share_for(const std::string& hidden);

}  // namespace pillbox
