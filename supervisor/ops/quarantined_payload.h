#pragma once
// A quarantine record with its payload, loaded the one way the operator
// commands that run a record again (reproduce, minimize) need it: so that a
// missing record or payload reads the same whichever command met it.
#include <cstdint>
#include <optional>
#include <string>

#include "shared/child_config.h"
#include "shared/status.h"
#include "supervisor/exec/record_policy.h"
#include "supervisor/store/quarantine_store.h"

namespace pillbox {

struct QuarantinedPayload {
  store::QuarantineRecord record;
  std::string payload;  // the original bytes, checked against their hash
};

// Errors: the store cannot be read, "no quarantine record ID in this store",
// the payload is missing or does not match its hash.
Expected<QuarantinedPayload> load_quarantined_payload(store::QuarantineStore& quarantine, std::int64_t id);

// What the record ran under (its handler; the policy `given`, the operator's
// --policy, else this machine's for the record's claim: record_policy.h) as
// a config for this host; the error names the record ("record 12: ...").
Expected<ChildConfig> recorded_config_of(const store::QuarantineRecord& record,
                                         const std::optional<Policy>& given = std::nullopt,
                                         const RecordAllowance& allowed = {});

}  // namespace pillbox
