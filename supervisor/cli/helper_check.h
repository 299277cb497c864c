#pragma once
// Before a command that runs tasks touches anything (a store, the inputs):
// is pillbox-sandbox there? A pillbox binary copied away from its helpers
// then fails at once, saying what is missing, where it looked and what to do,
// instead of failing later at the zygote's start.
namespace pillbox::cli {

// -1 when the command needs no sandbox binary or it was found; otherwise the
// message is on stderr and the exit code (kExitSetup) is returned.
int check_helpers_for(int argc, char** argv);

}  // namespace pillbox::cli
