#pragma once
// The zygote: a lean, single-threaded process started by the supervisor
// (`pillbox-sandbox --zygote`) that prepares the handler once and forks one
// confined child per task (no exec per task). It is the parent and reaper of
// its children: it reports their pid when forked and their wait status,
// rusage, crash report and exec streams when they exit. Control messages
// (shared/control.h) arrive on stdin and leave on stdout.
namespace pillbox::sandbox {

// Runs until stdin closes (the supervisor went away); returns the exit code.
int run_zygote();

}  // namespace pillbox::sandbox
