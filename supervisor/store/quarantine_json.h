#pragma once
// A quarantine record as one JSON object: what `quarantine list --json`
// prints and what the --on-quarantine hook reads on stdin.
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

#include "supervisor/store/quarantine_store.h"

namespace pillbox {

// `attempts` is the number of attempts the task took (0: not known here);
// `tally`, when given, becomes "attempts_by_kind".
std::string quarantine_record_json(const store::QuarantineRecord& record, std::uint32_t attempts,
                                   bool new_fingerprint, const std::string& store_dir,
                                   const std::vector<store::AttemptTally>* tally = nullptr);

// "2026-11-30T14:39:00.123Z"
std::string iso_time(std::int64_t ms_since_epoch);
// iso_time's text read back (exactly that form); nullopt for anything else.
std::optional<std::int64_t> parse_iso_time(std::string_view text);

}  // namespace pillbox
