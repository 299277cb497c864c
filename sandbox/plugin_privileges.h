#pragma once
// Where plugin code runs. A plugin (`--handler plugin:PATH`) is someone
// else's code, and dlopen runs its constructors and its `init` at once. When
// pillbox runs as root, that must not happen in the zygote (which stays root
// to start each child): the plugin is loaded in each child instead, after
// the child dropped to its slot's uid and gave up every capability, and
// before its seccomp filter. Built-in handlers are pillbox's own code and are
// prepared once in the zygote, as before; without root a plugin is loaded
// once in the zygote too (it runs with the rights of whoever started pillbox,
// like any program they run).
//
// The price is a dlopen and an `init` per task for plugins run as root
// (docs/plugins.md gives the measured cost).
#include "shared/child_config.h"
#include "shared/status.h"

namespace pillbox::sandbox {

// True when `config`'s handler must only ever be loaded after the privilege drop.
bool load_handler_in_child(const ChildConfig& config);

// Loads the handler once in a throwaway process that first drops to an
// unprivileged uid (the policy's user), so that a plugin
// that cannot be read or loaded by the task's uid, or whose init fails, is
// one clear error before any task runs. The error says where a permission
// is missing and why plugins are not loaded as root.
// A handler that cannot be loaded is the user's to fix (ErrorCode::kConfig:
// exit 2); a host that cannot run the check is not (kSetup: exit 3).
Status check_handler_unprivileged(const ChildConfig& config);

}  // namespace pillbox::sandbox
