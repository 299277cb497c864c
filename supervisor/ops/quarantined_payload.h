#pragma once
// What a quarantine record ran under, as a config for this host: the one
// way the operator commands that run a record again (reproduce, minimize)
// read it, so that a record that cannot run here reads the same whichever
// command met it.
#include <optional>

#include "shared/child_config.h"
#include "shared/status.h"
#include "supervisor/exec/record_policy.h"
#include "supervisor/ops/quarantine_source.h"

namespace pillbox {

// Its handler; the policy `given`, the operator's --policy, else this
// machine's for the record's claim (record_policy.h). The error names the
// record ("record 12: ...").
Expected<ChildConfig> recorded_config_of(const SourcedRecord& record, const std::optional<Policy>& given = std::nullopt,
                                         const RecordAllowance& allowed = {});

}  // namespace pillbox
