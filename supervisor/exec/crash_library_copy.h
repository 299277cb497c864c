#pragma once
// Exec mode preloads pillbox's crash library (LD_PRELOAD), which the loader
// opens as the task's uid. When the task's uid cannot reach pillbox's own
// (a clone under a 0700 home) or its path has a space or colon (the loader
// splits LD_PRELOAD on them, with no escape), tasks load a copy kept where
// any uid may read and only we may write: as root /var/lib/pillbox (else
// /var/cache, /run), otherwise the user's cache or runtime dir, else
// /tmp/pillbox-UID. The copy is content-addressed
// (libpillbox-crash-<16 hex of SHA-256>.so, 0444) and checked each run: an
// existing one is used only if ours, unwritable by others and byte-exact;
// anything else is replaced by rename, never written through.
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

// Where copies go for this process; "" when no candidate will do.
std::string crash_library_copy_dir();

}  // namespace pillbox
