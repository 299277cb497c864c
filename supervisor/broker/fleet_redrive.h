#pragma once
// `pillbox quarantine replay --redis URL --stream NAME`: records of the
// fleet's quarantine (fleet_quarantine.h) redriven, i.e. put back on NAME for
// the fleet's workers, in batches, with the brakes of the store's replay
// (supervisor/ops/replay.h): --rate, --stop-after, --max-failure-ratio.
//
// One record's redrive, in one server-side script: its redrive lock is taken
// (SET NX PX: refused while another replay holds it), an entry is added to
// NAME with the fields key, payload and redrive_of=<record id>, and the
// record's state names that entry as waiting for its outcome. A record whose
// earlier redrive is still on NAME (a replay that timed out or was stopped)
// is not redriven again until a worker has settled it.
//
// A batch's outcomes are waited for, blocking (XREAD BLOCK, no polling), on
// NAME:results and NAME:dlq from the last ids they had before the batch was
// added: the worker copies redrive_of into the result or the new dead letter,
// and its `entry` field names the redrive. An ok result marks the record
// resolved, a new dead letter failed-again (that dead letter is an attempt
// of the record, not a record: fleet_quarantine.h); either way the outcome
// joins the record's state and the lock is deleted. Records with no outcome
// within --batch-timeout (or when SIGINT/SIGTERM stops the wait) are named,
// their locks deleted, their redrives left on the stream (which keeps them from
// being redriven again until a worker settles them), and the replay stops.
// A lock is a lease of 20 s that its replay renews while it runs: a replay
// that dies (SIGKILL) leaves its records "replaying" for 20 s at most.
//
// What an earlier replay redrove and never recorded (it died, or gave up
// waiting) is never redriven blindly: a record whose redrive (its state's
// waiting_entry) a worker has settled since gets the outcome the worker
// left in NAME:results or NAME:dlq, found by its entry and redrive_of
// fields, and is not redriven again. Only when that outcome is gone too
// (trimmed, or a worker with --no-results) is it redriven, and said so. An
// outcome is recorded once per redrive entry, whichever replay finds it.
//
// The workers must write NAME:results (their default; with --no-results an
// ok redrive is never seen and times out).
#include <string>
#include <vector>

#include "shared/status.h"
#include "supervisor/broker/fleet_quarantine.h"
#include "supervisor/ops/quarantine_source.h"

namespace pillbox::broker {

// The records a replay would redrive, oldest first, without redriving
// anything (--dry-run); `skipped` says which given ones it leaves and why.
Expected<std::vector<FleetRecord>> redrive_plan(FleetQuarantine& quarantine, const ReplayRun& run,
                                                std::vector<std::string>& skipped);

// Errors: an unknown id (usage), Redis failed (setup). A stop signal
// (SIGINT/SIGTERM) is not an error: stop_signal says which. Its result
// never counts `recovered`.
Expected<ReplayResult> redrive(FleetQuarantine& quarantine, const ReplayRun& run);

}  // namespace pillbox::broker
