#pragma once
// Evidence of how the supervisor died: its own fatal signal (SIGSEGV, SIGBUS,
// SIGILL, SIGFPE, SIGABRT, SIGSYS) leaves a note `<store>/deaths/run-<id>`
// that the next run reads into runs.died_of. A SIGKILL leaves none: it is
// never evidence. See docs/architecture.md, The supervisor's own deaths.
// The handler is async-signal-safe and chains to the previous one (e.g. a
// sanitizer's).
#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "shared/status.h"

namespace pillbox {

// Arms the note for this process's run `run_id` in `store_dir`; later calls
// re-arm it for another run. Errors only when the notes directory cannot be
// prepared.
Status arm_death_note(const std::string& store_dir, std::int64_t run_id);
// This run ends normally: a later fatal signal (in another part of the
// program) is not this run's death.
void disarm_death_note();

struct DeathNote {
  std::int64_t run_id = 0;
  std::string cause;  // "SIGSEGV", ...
  std::string file;   // to remove once recorded
};

// The notes earlier runs left in `store_dir` (none when there is no notes
// directory). Malformed or unreadable files are skipped.
std::vector<DeathNote> read_death_notes(const std::string& store_dir);

}  // namespace pillbox
