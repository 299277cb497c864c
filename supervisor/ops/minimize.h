#pragma once
// pillbox minimize: shrinks a quarantined payload while it still fails the
// same way, ddmin-style (docs/operator.md, 'pillbox minimize'). Progress is
// saved after improvements (MinimizeKeeper::saves_progress_now), so an
// interrupted minimization resumes.
#include <chrono>
#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <string_view>

#include "shared/child_config.h"
#include "shared/status.h"
#include "supervisor/exec/launcher.h"
#include "supervisor/exec/record_policy.h"
#include "supervisor/classify/outcome.h"
#include "supervisor/ops/quarantine_source.h"
#include "supervisor/store/quarantine_store.h"

namespace pillbox {

struct MinimizeSettings {
  std::size_t jobs = 1;
  std::int64_t max_runs = 5000;                  // over all sessions of this record's minimization
  std::chrono::milliseconds max_time{300'000};   // likewise
  bool restart = false;                          // forget earlier progress and start from the original
  LaunchMode mode = LaunchMode::kZygote;
  std::string sandbox_binary;                    // "" = find_sandbox_binary()
  std::string actor;
  // --policy; else this machine's policy for the record's claim
  // (supervisor/exec/record_policy.h).
  std::optional<Policy> policy;
  // What the command line allows beyond the shipped policy (record_policy.h).
  RecordAllowance allowed;
  // Runs so far, the best size so far.
  std::function<void(std::int64_t runs, std::size_t best_size)> on_progress;
};

struct MinimizeResult {
  std::size_t original_size = 0;
  std::size_t minimized_size = 0;
  std::string minimized_sha256;
  std::int64_t runs = 0;              // all sessions
  std::int64_t runs_now = 0;          // this session
  std::int64_t elapsed_ms = 0;        // all sessions
  bool finished = false;              // the search ran to its end
  bool resumed = false;               // went on from an earlier session's best payload
  std::string stopped_by;             // "", "--max-runs", "--max-time", "SIGINT", "SIGTERM"
  int stop_signal = 0;
};

// Whether `outcome` is "the same failure" as the record's: the same
// fingerprint, or for cpu-limit, wall-timeout and oom the same kind.
bool same_failure(const store::QuarantineEntry& record, const Outcome& outcome);

// Where a minimization keeps its progress and result, with the record
// (QuarantineSource::minimize_keeper: the store's tables; Redis's keys,
// supervisor/broker/fleet_minimize_keeper.h; RabbitMQ's streams and Kafka's topics,
// supervisor/broker/fleet_log_minimize_keeper.h).
class MinimizeKeeper {
 public:
  virtual ~MinimizeKeeper() = default;
  struct Saved {
    store::MinimizeState state;
    std::string best;  // the bytes whose sha256 is state.best_sha256
  };
  // The progress of an earlier session, or nullopt when there is none.
  virtual Expected<std::optional<Saved>> load() = 0;
  virtual Status clear() = 0;
  // Whether an improvement is to be saved now. A keeper whose saves are
  // dear (RabbitMQ's and Kafka's: a compare and set of a log read whole,
  // supervisor/broker/fleet_log_minimize_keeper.h) answers false for a few
  // seconds after each save: the search asks again after each run ends and
  // saves the best then, so a session killed loses only what it found
  // since. The store and Redis take every improvement.
  virtual bool saves_progress_now() { return true; }
  // After an improvement (when saves_progress_now()), and when a session ends.
  virtual Status save(std::string_view best, const store::MinimizeState& state) = 0;
  // A smaller payload than the original was found: the record's minimized
  // payload is now `sha256` (saved already), with an audit entry.
  virtual Status record(const std::string& sha256, const std::string& detail) = 0;
};

// Minimizes `payload`, the payload of `record`, under `config`, keeping
// progress and the result through `keeper`. `config` may be the error that
// says why the record cannot run here: it is one only when there is still
// something to search. Errors: that one; the original payload does not fail
// the same way now; the sandbox or the keeper failed.
Expected<MinimizeResult> minimize_payload(const store::QuarantineRecord& record, Expected<ChildConfig> config,
                                          std::string payload, MinimizeKeeper& keeper,
                                          const MinimizeSettings& settings);

// Minimizes record `r` of `quarantine`, its progress and result kept there
// (QuarantineSource::minimize_keeper). Errors: its payload cannot be read;
// the original payload does not fail the same way now; its handler or
// policy cannot run here ("record ID: ..."); the sandbox or the quarantine
// failed.
Expected<MinimizeResult> minimize_record(QuarantineSource& quarantine, const SourcedRecord& r,
                                         const MinimizeSettings& settings);

}  // namespace pillbox
