#pragma once
// Where the store lives. Quarantined payloads are exactly the inputs that
// crash parsers, so the directory is 0700 and this user's, its files 0600.
#include <string>

#include "shared/status.h"

namespace pillbox::store {

// --store FLAG, else $PILLBOX_STORE, else $XDG_STATE_HOME/pillbox, else
// $HOME/.local/state/pillbox. Errors when none of them can be used (no
// flag, no environment, no HOME).
Expected<std::string> resolve_store_dir(const std::string& flag);

// Creates the directory (and missing parents, 0700) or checks an existing
// one: a real directory (not a symlink), owned by the effective uid, with no
// group or other permissions. Errors say what is wrong and what to run.
Status prepare_store_dir(const std::string& dir);

}  // namespace pillbox::store
