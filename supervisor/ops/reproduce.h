#pragma once
// pillbox reproduce: a quarantined payload run N times under its recorded
// handler and policy, judged reliable, flaky or not reproduced
// (docs/operator.md, 'pillbox reproduce'). The verdict goes into the record.
#include <cstdint>
#include <functional>
#include <map>
#include <optional>
#include <string>

#include "shared/child_config.h"
#include "supervisor/classify/outcome.h"
#include "shared/status.h"
#include "supervisor/exec/launcher.h"
#include "supervisor/exec/record_policy.h"
#include "supervisor/ops/quarantine_source.h"
#include "supervisor/store/quarantine_store.h"

namespace pillbox {

struct ReproduceSettings {
  std::size_t runs = 5;
  std::size_t jobs = 1;
  LaunchMode mode = LaunchMode::kZygote;
  std::string sandbox_binary;                 // "" = find_sandbox_binary()
  std::string actor;                          // for the audit trail
  // --policy; else this machine's policy for the record's claim
  // (supervisor/exec/record_policy.h).
  std::optional<Policy> policy;
  // What the command line allows beyond the shipped policy (record_policy.h).
  RecordAllowance allowed;
  // Runs so far, and how the last one ended.
  std::function<void(std::size_t done, const Outcome& last)> on_progress;
};

// Runs that ended otherwise than the record, alike in kind and fingerprint,
// with what the first said, so the operator sees why ("python3: can't open
// file ..."), not only that it differs.
struct OtherOutcome {
  std::size_t count = 0;
  std::uint64_t first_run = 0;                // 1-based, in the order the runs were started
  std::string kind;
  std::string fingerprint;                    // "" for ok
  std::string message;                        // the first run's, as the child's output made it
};

struct ReproduceResult {
  std::size_t runs = 0;                       // runs that ended (fewer than asked when stopped)
  std::size_t matches = 0;                    // ... with the record's fingerprint
  std::map<std::string, OtherOutcome> others; // "kind fingerprint" of the other runs -> them
  std::string verdict;                        // reliable | flaky | not-reproduced ("" when stopped before the end)
  int stop_signal = 0;                        // SIGINT/SIGTERM: nothing recorded
};

// "kind fingerprint" ("kind" alone when there is none), as `others` keys them.
std::string outcome_label(const std::string& kind, const std::string& fingerprint);

// What to tell the operator when an exec record without a working directory
// (made before pillbox kept one) ran differently: its relative paths were
// resolved against this process's directory. "" when that does not apply.
std::string missing_working_dir_hint(const store::QuarantineEntry& entry);

// "reliable" when matches >= runs / 2 (and at least one), as ClusterFuzz
// judges; "flaky" when fewer but some run failed (any way);
// "not-reproduced" when every run was ok.
std::string reproduce_verdict(const ReproduceResult& result);

// Runs `payload`, a record's (`entry`: its key and fingerprint), under
// `config` and judges it, recording nothing: for a record kept elsewhere
// than the store (the fleet's quarantine, supervisor/broker/fleet_quarantine.h).
// Errors: the sandbox cannot start.
Expected<ReproduceResult> reproduce_payload(const store::QuarantineEntry& entry, ChildConfig config,
                                            std::string payload, const ReproduceSettings& settings);

// The audit entry's detail for a verdict: "reliable: 5 of 5 runs ended with
// FP; handler-error FP2 x1 (run 3: MESSAGE)"; with the hint above when it applies.
std::string reproduce_detail(const store::QuarantineEntry& entry, const ReproduceResult& result);

// Runs record `r` of `quarantine` and, unless stopped early, keeps the
// verdict with it with an audit entry. Errors: its payload cannot be read,
// its handler or policy unusable here ("record ID: ..."), the sandbox
// cannot start, the quarantine cannot be written.
Expected<ReproduceResult> reproduce_record(QuarantineSource& quarantine, const SourcedRecord& r,
                                           const ReproduceSettings& settings);

}  // namespace pillbox
