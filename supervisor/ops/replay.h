#pragma once
// pillbox quarantine replay on the store (docs/operator.md, 'pillbox
// quarantine replay'): payloads run again in batches, with brakes. Successes
// become `resolved` (ReplayStore::finish keeps their output), failures
// `failed-again`. A patched record runs its newest revision. Records are
// claimed batch by batch (status `replaying`), so concurrent replays never
// run the same record.
#include <cstdint>
#include <functional>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "shared/policy.h"
#include "shared/status.h"
#include "supervisor/exec/child_setup.h"
#include "supervisor/exec/launcher.h"
#include "supervisor/classify/outcome.h"
#include "supervisor/store/replay_store.h"

namespace pillbox {

// --batch, --rate, --stop-after and --max-failure-ratio, for either
// quarantine: how fast a replay goes and when it stops (replay_tally.h).
struct ReplayBrakes {
  std::size_t batch = 10;          // records claimed (or redriven) and judged together
  double rate = 0;                 // payloads started per second (0: no limit)
  std::size_t stop_after = 0;      // stop when this many fail again with one fingerprint (0: never)
  double max_failure_ratio = 1.0;  // stop when more than this share of a batch fails again (1: never)
};

struct ReplaySettings : ReplayBrakes {
  store::ReplaySelection selection;
  std::optional<HandlerChoice> handler;   // replay under this handler or command instead of the recorded one
  std::optional<Policy> policy;           // ... and/or this policy
  RecordAllowance allowed;                // else the record's, with what this allows (record_policy.h)
  std::size_t jobs = 1;
  LaunchMode mode = LaunchMode::kZygote;
  std::string sandbox_binary;
  std::string actor;
  // Each replayed record's outcome and verdict; `revision` > 0: it ran that
  // patch revision, 0: the original.
  std::function<void(const store::QuarantineRecord&, const Outcome&, store::ReplayVerdict, std::int64_t revision)>
      on_result;
  std::function<void(std::size_t done, std::size_t total)> on_progress;
};

struct ReplayResult {
  std::size_t selected = 0;               // records the selection matched and may replay
  std::size_t replayed = 0;
  std::size_t resolved = 0;
  std::size_t failed_again = 0;
  std::size_t not_replayed = 0;           // left as they were (stopped, or taken by another replay)
  std::size_t taken_by_others = 0;        // claimed by a concurrent replay first
  std::size_t recovered = 0;              // abandoned claims taken back before starting
  // Fleet: records an earlier replay redrove without recording how that
  // ended, whose outcome was found in NAME:results or NAME:dlq and recorded
  // (counted in replayed too); never redriven a second time.
  std::size_t earlier_outcomes = 0;
  std::vector<std::string> notices;       // what else the operator should know, one line each
  std::vector<std::string> skipped;       // why given records were left out
  std::size_t unreadable = 0;             // claimed, but their payload cannot be read: left as they were
  std::map<std::string, std::size_t> failures_by_fingerprint;
  std::string stopped_because;            // "" when every selected record was replayed
  int stop_signal = 0;
};

// The records the selection would replay, without claiming anything (--dry-run).
Expected<std::vector<store::QuarantineRecord>> replay_plan(store::ReplayStore& replays, const ReplaySettings& settings,
                                                           std::vector<std::string>& skipped);

Expected<ReplayResult> replay(store::QuarantineStore& quarantine, store::ReplayStore& replays,
                              const ReplaySettings& settings);

}  // namespace pillbox
