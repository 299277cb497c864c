#pragma once
// The quarantine entry for a failed payload, built in one place so that
// records from `run`, `fuzz` and `quarantine import` are alike.
#include <cstdint>
#include <string>

#include "supervisor/classify/outcome.h"
#include "supervisor/store/quarantine_store.h"
#include "supervisor/store/run_identity.h"

namespace pillbox {

// `source`: run | fuzz | import. Fills every field but task_id and origin.
store::QuarantineEntry make_quarantine_entry(const RunIdentity& identity, const Outcome& outcome,
                                             const std::string& key, const std::string& payload_sha256,
                                             std::int64_t payload_size, const std::string& source);

}  // namespace pillbox
