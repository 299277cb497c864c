#pragma once
// One `pillbox serve` per token file, so one per store. Each start writes a
// new access token to its token file (STORE/serve.token, access_token.h); a
// second serve with the same file (on another port) would replace the first
// one's token and break every page that holds it. So a serve first takes an
// exclusive flock(2) on the lock beside it (STORE/serve.lock), held until it
// exits (the kernel drops it when the process ends, however it ends), and
// writes its pid and URL into it for the serve that is refused.
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
