#pragma once
// An outcome's fields as JSON (outcome_record.h): in a `run --json` line
// (supervisor/cli/run_output.h), a quarantine record
// (supervisor/store/quarantine_json.h, also the hooks' stdin), a dead letter
// and a delivery of the fleet's history (supervisor/broker/). One writer and
// one reader, so that their names and their null rules cannot drift apart;
// scripts read them all.
#include <nlohmann/json.hpp>
#include <optional>

#include "supervisor/classify/outcome_record.h"

namespace pillbox {

// Sets kind, fingerprint (null when ""), crash_state, message, signal (by
// name, "SIGSEGV"; null for none), syscall (null when ""), exit_code (null
// when negative), cpu_ms, wall_ms and max_rss_kb in `object`.
void put_outcome_record(const OutcomeRecord& record, nlohmann::json& object);

// Reads them back from `object`, which anyone who can write where it was kept
// may have written. A field that is absent or null keeps its default; a
// signal may be a name or a number 0..kMaxSignal (deliveries written before
// the two shared this mapping); whole numbers only (a float is never
// converted), an exit code one an int holds, a figure (cpu_ms, ...) never
// negative; a crash state a list of strings.
// A field of another type or out of range (a signal name that is no signal,
// a frame that is not a string): with `strict`, nullopt (a delivery history
// that does not trust it); without, the field keeps its default, and frames
// that are not strings are skipped (a dead letter shown for what it still
// says).
std::optional<OutcomeRecord> read_outcome_record(const nlohmann::json& object, bool strict);

// A crash state as one JSON text (an array of strings, bytes that are not
// UTF-8 replaced), as a store keeps it in one column; and back: a text
// that is not such an array (or nests deeper than kMaxJsonDepth) is one
// frame that holds it, so nothing a row says is lost and nothing is parsed
// that would overflow a printer's stack.
std::string crash_state_text(const std::vector<std::string>& crash_state);
std::vector<std::string> crash_state_of_text(const std::string& text);

}  // namespace pillbox
