#pragma once
// pillbox reproduce: a quarantined payload run N times in the sandbox under
// its recorded handler and policy; how many runs end with the record's
// fingerprint decides whether it reproduces reliably (at least half of them,
// as ClusterFuzz judges) or is flaky. The verdict goes into the record.
#include <cstdint>
#include <functional>
#include <map>
#include <string>

#include "shared/child_config.h"
#include "supervisor/classify/outcome.h"
#include "shared/status.h"
#include "supervisor/exec/launcher.h"
#include "supervisor/store/quarantine_store.h"

namespace pillbox {

struct ReproduceSettings {
  std::size_t runs = 5;
  std::size_t jobs = 1;
  LaunchMode mode = LaunchMode::kZygote;
  std::string sandbox_binary;                 // "" = find_sandbox_binary()
  std::string actor;                          // for the audit trail
  // Runs so far, and how the last one ended.
  std::function<void(std::size_t done, const Outcome& last)> on_progress;
};

struct ReproduceResult {
  std::size_t runs = 0;                       // runs that ended (fewer than asked when stopped)
  std::size_t matches = 0;                    // ... with the record's fingerprint
  std::map<std::string, std::size_t> others;  // "kind fingerprint" of the other runs -> count
  std::string verdict;                        // reliable | flaky ("" when stopped before the end)
  int stop_signal = 0;                        // SIGINT/SIGTERM: nothing recorded
};

// "reliable" when matches >= runs / 2 (and at least one), else "flaky".
std::string reproduce_verdict(std::size_t runs, std::size_t matches);

// Runs `payload`, a record's (`entry`: its key and fingerprint), under
// `config` and judges it, recording nothing: for a record kept elsewhere
// than the store (the fleet's quarantine, supervisor/broker/fleet_quarantine.h).
// Errors: the sandbox cannot start.
Expected<ReproduceResult> reproduce_payload(const store::QuarantineEntry& entry, ChildConfig config,
                                            std::string payload, const ReproduceSettings& settings);

// The audit entry's detail for a verdict: "reliable: 5 of 5 runs ended with FP; ...".
std::string reproduce_detail(const store::QuarantineEntry& entry, const ReproduceResult& result);

// Runs record `id` and, unless stopped early, records the verdict with an
// audit entry. Errors: no such record, its handler or policy unusable here,
// the sandbox cannot start, the store cannot be written.
Expected<ReproduceResult> reproduce_record(store::QuarantineStore& quarantine, std::int64_t id,
                                           const ReproduceSettings& settings);

}  // namespace pillbox
