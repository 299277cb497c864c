#pragma once
// An operator's allowance of a fleet record to be replayed (`quarantine
// allow`), signed with the fleet key (fleet_key.h). A record's state is not
// signed: whoever can write NAME:dlq:state on Redis, or publish to
// NAME.dlq.state on RabbitMQ, can write "allowed" into it. So `replay
// --allowed` takes a record on a valid allowance only, never on its status.
//
// The signature covers the dead-letter stream's name, the record's id, the
// sha256 of its payload (an allowance is of those bytes), who allowed it
// and when. What it cannot cover: an allowance revoked, or spent by a
// replay, can be written back by whoever can write the state (its sig is
// still valid); it allows only what an operator allowed once. Pure: no broker.
#include <cstdint>
#include <string>

#include "shared/status.h"
#include "supervisor/broker/fleet_key.h"
#include "supervisor/broker/fleet_record.h"

namespace pillbox::broker {

// The allowance of `record` (in `dlq`) by `actor` at `at`, signed with
// `key`; unsigned ("" sig) without one.
FleetAllowance make_allowance(const FleetKey* key, const std::string& dlq, const FleetRecord& record,
                              const std::string& actor, std::int64_t at);

// What `key` says of `record`'s allowance: kUnchecked without a key;
// kMissing when it is not allowed or its allowance has no sig; kValid or
// kBad.
Signature allowance_signature(const FleetKey* key, const std::string& dlq, const FleetRecord& record);

// Whether `replay --allowed` may take `record`, allowed, on its allowance
// (`allowance`, allowance_signature's): a valid one, or any with
// --trust-unsigned. The error names the record, what is wrong and what to do.
Status check_allowance(const FleetRecord& record, Signature allowance, bool trust_unsigned);

}  // namespace pillbox::broker
