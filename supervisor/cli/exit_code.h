#pragma once
// The exit code of a command that failed: chosen from the error's code (set
// where the error was made), never from its message.
#include "shared/status.h"

namespace pillbox::cli {

// kExitUsage or kExitSetup (commands.h).
int exit_code_for(ErrorCode code);

}  // namespace pillbox::cli
