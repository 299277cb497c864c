#pragma once
// One running `pillbox serve` per token file: each start writes a new token
// there, so a second console on the same file would silently break the
// first's token (every action of the first answered 403). A serve holds an
// exclusive flock on FILE.lock (beside the token file) for as long as it
// runs; the kernel lets go when it exits, however it exits.
#include <string>

#include "shared/status.h"
#include "shared/unique_fd.h"

namespace pillbox::serve {

// The held lock of `token_file`; an error naming the file when another
// running serve holds it (or the lock file cannot be made).
Expected<UniqueFd> lock_token_file(const std::string& token_file);

}  // namespace pillbox::serve
