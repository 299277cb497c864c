#pragma once
// The ten quarantine columns of an OutcomeRecord, in this order; the crash
// state is one JSON text (crash_state_text).
#include "supervisor/classify/outcome_record.h"
#include "supervisor/store/statement.h"

namespace pillbox::store {

inline constexpr const char* kOutcomeColumns =
    "kind, fingerprint, crash_state, message, signal, syscall, exit_code, cpu_ms, wall_ms, max_rss_kb";

// Binds `record` to the parameters ?first .. ?first+9.
void bind_outcome(Statement& statement, int first, const OutcomeRecord& record);
// Reads `record` from the columns `column` .. column+9 of the current row
// and moves `column` past them.
void read_outcome(const Statement& statement, int& column, OutcomeRecord& record);

}  // namespace pillbox::store
