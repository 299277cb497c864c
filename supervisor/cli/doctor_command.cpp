// pillbox doctor (placeholder replaced below in this session)
#include "supervisor/cli/commands.h"
namespace pillbox::cli {
int doctor_command(int, char**) { return kExitSetup; }
}  // namespace pillbox::cli
