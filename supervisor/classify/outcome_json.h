#pragma once
// The fields every JSON form of an outcome shares: a `run --json` line
// (supervisor/cli/run_output.h) and a quarantine record
// (supervisor/store/quarantine_json.h, also the hooks' stdin). One writer, so
// that their names and their null rules cannot drift apart; scripts read
// both.
#include <cstdint>
#include <nlohmann/json.hpp>
#include <optional>
#include <string_view>

#include "supervisor/classify/outcome.h"

namespace pillbox {

// Views into the outcome or record they describe: they must outlive it.
struct OutcomeFields {
  std::string_view kind;                        // "crash", "ok", ...
  std::optional<std::string_view> fingerprint;  // absent: null
  nlohmann::json crash_state;                   // innermost frame first
  std::string_view message;
  int signal = 0;                               // 0: null; else its name ("SIGSEGV")
  std::string_view syscall;                     // "": null
  std::int64_t exit_code = -1;                  // negative: null
  std::int64_t cpu_ms = 0;
  std::int64_t wall_ms = 0;
  std::int64_t max_rss_kb = 0;
};

// An outcome's fields; an ok outcome has no fingerprint (null).
OutcomeFields outcome_fields(const Outcome& outcome);

// Sets kind, fingerprint, crash_state, message, signal, syscall, exit_code,
// cpu_ms, wall_ms and max_rss_kb in `object`.
void put_outcome_fields(const OutcomeFields& fields, nlohmann::json& object);

}  // namespace pillbox
