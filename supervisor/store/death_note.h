#pragma once
// Evidence of how the supervisor died, for the next run.
//
// A task whose attempt never finished was running when pillbox died. That
// alone proves nothing: a `kill -9` from an operator, a container stopped,
// the host's OOM killer end every task in flight the same way. A payload is
// charged for such a loss only on evidence that pillbox itself failed while
// it ran (supervisor/flow/retry_policy.h): a fatal signal of the supervisor's own
// (SIGSEGV, SIGBUS, SIGILL, SIGFPE, SIGABRT, SIGSYS), which its handler,
// armed here, writes as a note `<store>/deaths/run-<id>` before the process
// dies. The next run reads the notes into the ledger (runs.died_of) and
// removes them. A SIGKILL leaves no note: it is never evidence.
//
// The handler uses only async-signal-safe calls on names prepared when it is
// armed, then lets the signal take its course (chaining to the handler that
// was there before, e.g. a sanitizer's).
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
