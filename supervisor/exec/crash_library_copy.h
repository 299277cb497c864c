#pragma once
// Exec mode preloads pillbox's crash library into the command (LD_PRELOAD),
// and the dynamic loader opens it as the task's uid. Where pillbox itself
// lives may not allow that, through no fault of any payload:
//   - a build or install under a 0700 directory (a clone in /root, a home
//     directory) that the task's unprivileged uid cannot enter;
//   - a path with a space or a colon, where the loader splits LD_PRELOAD,
//     with no way to escape either (a clone in "/srv/my work/pillbox").
// Then tasks load a copy that pillbox keeps where any uid may read it and
// only its owner may write: as root, /var/lib/pillbox/ (else /var/cache or
// /run); otherwise ~/.cache/pillbox/ ($XDG_CACHE_HOME, else
// $XDG_RUNTIME_DIR, else /tmp/pillbox-UID, bound into the tasks' private
// /tmp; tasks run as our own uid then). The first whose path
// the loader can hold and map: no space or colon, not on a noexec mount (a
// systemd host's /run is one), not under /tmp. The copy is content-addressed
// (libpillbox-crash-<16 hex of its SHA-256>.so, mode 0444): two runs of
// different builds never share one, and an existing copy is used only if
// it is a regular file of ours that nobody else may write, holding exactly
// the library's bytes (checked each run: ~100 KiB); anything else there is
// replaced by rename, never written through.
#include <cstdint>
#include <string>

#include "shared/child_config.h"
#include "shared/status.h"

namespace pillbox {

// The path tasks preload for `config` (exec mode) when they run as
// `uid`/`gid`: config.crash_lib itself when the loader can use it as that
// uid, else the copy (made or checked now). "" when there is no library.
// An error says why no copy could be made, and what to do.
Expected<std::string> crash_library_for_tasks(const ChildConfig& config, std::uint32_t uid, std::uint32_t gid);

// Where copies go for this process (above); "" when no candidate will do.
std::string crash_library_copy_dir();

}  // namespace pillbox
