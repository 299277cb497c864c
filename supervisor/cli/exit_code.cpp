#include "supervisor/cli/exit_code.h"

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

}  // namespace pillbox::cli
