#include "supervisor/cli/exit_code.h"

#include <cstdio>

#include "supervisor/cli/commands.h"

namespace pillbox::cli {

int exit_code_for(ErrorCode code) {
  switch (code) {
    case ErrorCode::kUsage:
    case ErrorCode::kConfig:
      return kExitUsage;
    case ErrorCode::kSetup:
      return kExitSetup;
  }
  return kExitSetup;
}

int command_error(const std::string& command, const std::string& message, int exit_code) {
  std::fprintf(stderr, "pillbox %s: %s\n", command.c_str(), message.c_str());
  return exit_code;
}

int work_error(const std::string& command, const std::string& message, ErrorCode code) {
  const int exit_code = exit_code_for(code);
  return command_error(command, exit_code == kExitUsage ? message : "setup error: " + message, exit_code);
}

}  // namespace pillbox::cli
