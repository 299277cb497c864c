#pragma once
// Discarding a store's quarantine record: marked handled without a fix,
// the reason in its audit trail. StoreQuarantineSource's check_discardable
// and discard (store_quarantine_source.h), which `pillbox quarantine
// discard` and the console's POST /api/records/ID/discard both reach.
#include <string>

#include "shared/status.h"
#include "supervisor/store/quarantine_store.h"

namespace pillbox {

// A usage error (kUsage) when `record` may not be discarded now: it is being
// replayed. `id_text` names it in the message.
Status check_discardable(const store::QuarantineRecord& record, const std::string& id_text);

// What discard_record did.
enum class DiscardOutcome { kDiscarded, kAlreadyDiscarded };

// Sets `record` to discarded with an audit entry ("discarded", by `actor`,
// detail "REASON (was STATUS)"), in one transaction of its own. A record
// already discarded is left as it is. REQUIRES: check_discardable passed.
Expected<DiscardOutcome> discard_record(store::QuarantineStore& quarantine, const store::QuarantineRecord& record,
                                        const std::string& actor, const std::string& reason);

}  // namespace pillbox
