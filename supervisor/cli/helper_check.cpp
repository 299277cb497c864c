#include "supervisor/cli/helper_check.h"

#include <cstdio>
#include <cstring>
#include <string>

#include "supervisor/cli/commands.h"
#include "supervisor/exec/install_paths.h"

namespace pillbox::cli {
namespace {

// The commands (and quarantine verbs) that start the sandbox. `doctor` is
// not one: it reports a missing helper as one of its lines.
bool runs_tasks(int argc, char** argv) {
  const std::string command = argv[1];
  if (command == "run" || command == "reproduce" || command == "minimize" || command == "fuzz" || command == "worker") {
    return true;
  }
  if (command == "quarantine" && argc > 2) {
    // replay runs tasks with a local store and with a fleet's (--redis) alike.
    return std::strcmp(argv[2], "import") == 0 || std::strcmp(argv[2], "replay") == 0;
  }
  return false;
}

bool asks_for_help(int argc, char** argv) {
  for (int i = 2; i < argc; ++i) {
    if (std::strcmp(argv[i], "--") == 0) return false;
    if (std::strcmp(argv[i], "--help") == 0 || std::strcmp(argv[i], "-h") == 0) return true;
  }
  return false;
}

}  // namespace

int check_helpers_for(int argc, char** argv) {
  if (argc < 2 || !runs_tasks(argc, argv) || asks_for_help(argc, argv)) return -1;
  const HelperLocation sandbox = locate_sandbox_binary();
  if (!sandbox.path.empty()) return -1;
  std::fprintf(stderr, "pillbox %s: %s\n", argv[1], missing_helper_message(sandbox).c_str());
  return kExitSetup;
}

}  // namespace pillbox::cli
