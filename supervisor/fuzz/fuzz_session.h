#pragma once
// pillbox fuzz: a mutation loop for targets that cannot be instrumented.
// Candidates run and are classified like `run` tasks, in one dispatcher; a
// failure with a new fingerprint becomes a quarantine record, a known one
// counts as a repeat. See docs/fuzzing.md.
#include <chrono>
#include <cstdint>
#include <functional>
#include <map>
#include <string>
#include <vector>

#include "shared/child_config.h"
#include "shared/status.h"
#include "supervisor/ops/finding_recorder.h"
#include "supervisor/exec/launcher.h"

namespace pillbox::fuzz {

struct FuzzSeed {
  std::string name;    // "file x", "quarantine record 7": what the origin of a finding names
  std::string bytes;
};

struct FuzzFinding {
  std::int64_t record_id = 0;
  std::string kind;
  std::string fingerprint;
  std::string message;
  std::size_t size = 0;
  std::string seed;
  std::string mutations;
  std::uint64_t run = 0;       // which run of the session found it (1-based)
  bool folded = false;         // the store is full: counted as a repeat instead
};

struct FuzzProgress {
  std::uint64_t runs = 0;
  std::size_t corpus = 0;
  std::size_t findings = 0;    // new records
  std::uint64_t repeats = 0;   // failures of fingerprints already on file
  // Every run's outcome kind so far ("ok", "crash", ...); valid during the call.
  const std::map<std::string, std::uint64_t>* by_kind = nullptr;
};

struct FuzzSettings {
  ChildConfig config;
  LaunchMode mode = LaunchMode::kZygote;
  std::string sandbox_binary;               // "" = find_sandbox_binary()
  std::size_t jobs = 1;
  std::vector<FuzzSeed> seeds;              // none: one empty input
  std::vector<std::string> dictionary;
  std::size_t max_len = 4096;               // no candidate is longer
  std::uint64_t max_runs = 0;               // 0: no limit
  std::chrono::milliseconds max_time{0};    // 0: no limit
  std::uint64_t rng_seed = 0;
  bool stop_on_finding = false;             // end the session at the first new record (like libFuzzer)
  std::size_t max_new_records = 1000;       // end the session after this many new records
  // <store>/fuzz-inflight, where running candidates are journaled
  // (inflight_journal.h); "": no journal.
  std::string journal_root;
  std::function<void(const FuzzProgress&)> on_progress;
  // Before the first run: candidates of dead sessions recovered, and those
  // left for another handler or policy.
  std::function<void(std::size_t recovered, std::size_t other_identity)> on_recovered;
  std::function<void(const FuzzFinding&)> on_finding;
};

struct FuzzResult {
  std::uint64_t runs = 0;
  std::int64_t elapsed_ms = 0;
  std::size_t corpus = 0;                   // inputs kept (seeds included)
  std::size_t features = 0;                 // behaviours seen
  std::vector<FuzzFinding> findings;        // new records, in the order found
  std::map<std::string, std::uint64_t> repeats;  // fingerprint -> failures counted on a record already on file
  std::map<std::string, std::uint64_t> by_kind;  // every run's outcome kind
  std::uint64_t duplicates_skipped = 0;     // candidates equal to one already run
  std::string stopped_by;                   // "--max-runs", "--max-time", "--stop-on-finding", "SIGINT", "SIGTERM"
  int stop_signal = 0;
  std::size_t recovered = 0;                // candidates of dead sessions run (or recorded) first
};

// Which outcome kinds are poison pills worth a record. Clean rejections
// (handler-error) are what a parser should do with garbage; sandbox-error and
// killed (a signal from outside) are never the payload's fault.
bool is_fuzz_finding(Kind kind);

// Errors: the sandbox cannot start, every run fails to start, or the store
// cannot be written.
Expected<FuzzResult> run_fuzz(FindingRecorder& recorder, const FuzzSettings& settings);

}  // namespace pillbox::fuzz
