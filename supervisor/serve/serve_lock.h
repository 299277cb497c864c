#pragma once
// One `pillbox serve` per token file, so one per store: a second serve
// would replace the first one's token (access_token.h) and break every page
// that holds it. A serve holds an exclusive flock(2) on the lock beside its
// token file until it exits (the kernel drops it however the process ends).
#include <string>

#include "shared/status.h"
#include "shared/unique_fd.h"

namespace pillbox::serve {

// The lock of `token_file`: its name with ".token" at the end replaced by
// ".lock" (STORE/serve.token: STORE/serve.lock), or ".lock" added.
std::string serve_lock_path(const std::string& token_file);

// The lock, held while the returned descriptor is open; "PID URL\n" written
// into the file. Another process holding it is an error (kSetup): "another
// pillbox serve (pid N, URL) is serving with the token file FILE; stop it or
// use its token". The file is opened without following a symlink, mode 0600.
Expected<UniqueFd> take_serve_lock(const std::string& token_file, const std::string& url);

}  // namespace pillbox::serve
