#pragma once
// An outcome's fields as JSON (outcome_record.h), for `run --json` lines,
// quarantine records (and the hooks' stdin), dead letters and the fleet's
// delivery history: one writer and one reader, so that names and null rules
// cannot drift apart.
#include <nlohmann/json.hpp>
#include <optional>

#include "supervisor/classify/outcome_record.h"

namespace pillbox {

// Sets kind, fingerprint (null when ""), crash_state, message, signal (by
// name, "SIGSEGV"; null for none), syscall (null when ""), exit_code (null
// when negative), cpu_ms, wall_ms and max_rss_kb in `object`.
void put_outcome_record(const OutcomeRecord& record, nlohmann::json& object);

// Reads them back from `object`, which may be hostile. Absent or null keeps
// the default. A signal is a name or a number 0..kMaxSignal (older
// deliveries); numbers must be whole (a float is never converted), an exit
// code must fit an int, figures are never negative, a crash state is a list
// of strings. A field of another type or out of range: with `strict`,
// nullopt (a delivery history); without, the field keeps its default and
// non-string frames are skipped (a dead letter shown for what it still says).
std::optional<OutcomeRecord> read_outcome_record(const nlohmann::json& object, bool strict);

// A crash state as one JSON text (an array of strings, invalid UTF-8
// replaced), as a store column keeps it; and back: a text that is not such
// an array, or nests deeper than kMaxJsonDepth, becomes one frame holding
// it, so nothing is lost and nothing overflows a printer's stack.
std::string crash_state_text(const std::vector<std::string>& crash_state);
std::vector<std::string> crash_state_of_text(const std::string& text);

}  // namespace pillbox
