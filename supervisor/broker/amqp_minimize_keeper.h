#pragma once
// Where `pillbox minimize --amqp` keeps its progress and result for a record
// of the fleet's quarantine on RabbitMQ (amqp_quarantine.h), as the store
// and Redis keep them (fleet_minimize_keeper.h), by the means RabbitMQ has:
//
// - The bytes (the best payload so far, the minimized one) are messages of
//   the stream NAME.dlq.minimized (amqp_payload_stream.h), appended.
//   Not in the state log: that log is read whole by every compare and set
//   and every listing, and a payload there would be read again by each of
//   them for ever.
// - The progress (runs, time, the best's sha256 and offset) and the result
//   (the minimized sha256 and offset, an audit entry `minimized`) are the
//   record's state in NAME.dlq.state, by its compare and set
//   (amqp_state_log.h), as Redis keeps them in NAME:dlq:state.
// - Dear, so not after every improvement: a compare and set reads the log
//   to its end (about 300 ms of waiting for the broker to fall quiet) and
//   the append reads its message back for its offset. The first
//   improvement is saved at once, later ones at most every 5 s
//   (saves_progress_now), and the end of every session always. A session
//   SIGKILLed resumes from the last best saved: at most 5 s of search lost.
//   A best payload already appended is not appended again (a session that
//   ends on the best it resumed from, record() of the best just saved):
//   the state names it.
// - Records a replay holds, or discarded: minimized all the same, as on
//   Redis (minimize runs here and changes no status; its compare and set
//   and a replay's retry on each other's change, so neither is lost).
// - What is read back is a claim (anyone who may publish to NAME.dlq.state
//   and NAME.dlq.minimized can write both, as on Redis anyone who may
//   write its keys): a best payload is taken only from the offset the
//   state names, when the message there says it is this record's, its
//   bytes have the state's sha256 and are no more than the record's own
//   payload; else the search starts over from the original, as on Redis.
//   Neither log is signed (the fleet key signs dead letters only); what a
//   best payload can do is be run under the record's handler and policy,
//   as any payload, once it fails as the record did.
#include <cstdint>
#include <memory>
#include <optional>
#include <string>

#include "supervisor/broker/amqp_payload_stream.h"
#include "supervisor/broker/fleet_record.h"
#include "supervisor/ops/minimize.h"

namespace pillbox::broker {

class AmqpQuarantine;

// The minimization of `record` at `offset` of NAME.dlq.minimized
// (AmqpPayloadStream::read), no larger than the record's own payload: as
// read (get()), else as its record claims it (a listing left it out).
Expected<std::optional<std::string>> read_minimization(AmqpPayloadStream& payloads, std::int64_t offset,
                                                       const FleetRecord& record, const std::string& sha256,
                                                       std::string& why_not);

// `quarantine` outlives the keeper.
std::unique_ptr<MinimizeKeeper> amqp_minimize_keeper(AmqpQuarantine& quarantine, std::string id, std::string actor);

}  // namespace pillbox::broker
