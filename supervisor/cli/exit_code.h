#pragma once
// How a command that failed says so: "pillbox COMMAND: MESSAGE" on stderr,
// and its exit code, chosen from the error's code (set where the error was
// made), never from its message.
#include <string>

#include "shared/status.h"

namespace pillbox::cli {

// kExitUsage or kExitSetup (commands.h).
int exit_code_for(ErrorCode code);

// "pillbox COMMAND: MESSAGE" on stderr; returns `exit_code`.
int command_error(const std::string& command, const std::string& message, int exit_code);

// The error that ended a command's work: a usage error as it is, any other
// as "setup error: MESSAGE"; returns exit_code_for(code).
int work_error(const std::string& command, const std::string& message, ErrorCode code);

}  // namespace pillbox::cli
