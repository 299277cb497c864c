#pragma once
// Where `pillbox minimize --amqp|--kafka` keeps its progress and result for
// a record of a fleet's quarantine whose broker keeps no values that can
// change (RabbitMQ's NAME.dlq, Kafka's T.dlq), as the store and Redis keep
// them (fleet_minimize_keeper.h), by the means such a broker has:
//
// - The bytes (the best payload so far, the minimized one) are entries of
//   the payload log NAME.dlq.minimized (fleet_payload_log.h), appended.
//   Not in the state log: that log is read whole by every compare and set
//   and every listing, and a payload there would be read again by each of
//   them for ever.
// - The progress (runs, time, the best's sha256 and position) and the
//   result (the minimized sha256 and position, an audit entry `minimized`)
//   are the record's state in NAME.dlq.state, by its compare and set
//   (fleet_state_log.h), as Redis keeps them in NAME:dlq:state.
// - Dear, so not after every improvement: a compare and set reads the log
//   to its end (on RabbitMQ about 300 ms of waiting for the broker to fall
//   quiet) and an append waits for the broker to have it. The first
//   improvement is saved at once, later ones at most every 5 s
//   (saves_progress_now), and the end of every session always. A session
//   SIGKILLed resumes from the last best saved: at most 5 s of search lost.
//   A best payload already appended is not appended again (a session that
//   ends on the best it resumed from, record() of the best just saved):
//   the state names it.
// - Records a replay holds, or discarded: minimized all the same, as on
//   Redis (minimize runs here and changes no status; its compare and set
//   and a replay's retry on each other's change, so neither is lost).
// - What is read back is a claim (anyone who may write to NAME.dlq.state
//   and NAME.dlq.minimized can write both, as on Redis anyone who may
//   write its keys): a best payload is taken only from the position the
//   state names, when the entry there says it is this record's, its bytes
//   have the state's sha256 and are no more than the record's own payload
//   (read_minimization); else the search starts over from the original, as
//   on Redis. Neither log is signed (the fleet key signs dead letters
//   only); what a best payload can do is be run under the record's handler
//   and policy, as any payload, once it fails as the record did.
#include <memory>
#include <string>

#include "supervisor/broker/fleet_dead_letters.h"
#include "supervisor/broker/fleet_payload_log.h"
#include "supervisor/ops/minimize.h"

namespace pillbox::broker {

// `quarantine` outlives the keeper; `payloads` is its NAME.dlq.minimized.
std::unique_ptr<MinimizeKeeper> log_minimize_keeper(FleetDeadLetters& quarantine, std::unique_ptr<PayloadLog> payloads,
                                                    std::string id, std::string actor);

}  // namespace pillbox::broker
