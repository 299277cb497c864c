#pragma once
// What operators did with the records of the fleet's quarantine on RabbitMQ
// (discard, reproduce's verdict): a stream can change no message, and
// RabbitMQ keeps no values, so each change is a message of its own in the
// stream queue NAME.dlq.state, appended, never changed:
//
//   body     {"record": "<offset in NAME.dlq>", "version": N, "state": <fleet_state.h's JSON>}
//   header   pillbox-writer: the writing process's random id
//
// A record's state is its first change of version 1, then the first of
// version 2 after it, and so on, in the stream's order: every reader
// computes the same. A change is a compare and set: read the log, write
// version N + 1, read on from where the log ended until the change comes
// back; when another version N + 1 of that record comes first, the change
// lost, and is tried again on what won (fleet_quarantine.h's Redis CAS,
// by another means). A state message that is not pillbox's (not JSON of
// this form) is left out and counted (unreadable()); the workers' notices
// of redrives that ran ok (amqp_replay_notice.h) share the stream and are
// no states.
//
// The log is as trusted as NAME:dlq:state is on Redis: whoever may publish
// to it can write a state. Do not give it a retention policy: a state
// removed is a record back to "quarantined".
#include <cstdint>
#include <functional>
#include <map>
#include <string>

#include "shared/status.h"
#include "supervisor/broker/amqp_connection.h"
#include "supervisor/broker/fleet_state.h"

namespace pillbox::broker {

// NAME.dlq.state
std::string amqp_state_log_name(const std::string& queue);

// Declares NAME.dlq.state, a stream queue (idempotent): by the workers
// with their topology (a replayed message's notice must route), and by
// whoever writes to it first. One of another type is a setup error worded
// by explain_mismatch.
Status declare_state_log(AmqpConnection& connection, const std::string& queue);

struct AmqpRecordState {
  std::int64_t version = 0;  // 0: nobody acted on it yet
  FleetState state;
};

class AmqpStateLog {
 public:
  // `connection` outlives this; `queue` is NAME.
  AmqpStateLog(AmqpConnection& connection, const std::string& queue);

  // Every record's state, from the log's first message (a missing log:
  // none yet).
  Expected<std::map<std::string, AmqpRecordState>> load();
  // Applies `change` to record `id`'s state as a compare and set (up to
  // 16 tries against other writers); declares the log when it is missing.
  // Returns the state written.
  Expected<FleetState> change(const std::string& id, const std::function<Status(FleetState&)>& change);
  // State messages the last load() left out (not pillbox's).
  std::int64_t unreadable() const { return unreadable_; }

 private:
  // Folds the log's messages at [from, ...) into `states` until `until`
  // says stop (true: stop after this message). `to` < 0: to the end now.
  Status fold(std::map<std::string, AmqpRecordState>& states, std::int64_t from, std::int64_t to,
              const std::function<bool(const AmqpMessage&)>& until);

  AmqpConnection& c_;
  std::string queue_;  // NAME
  std::string name_;
  std::int64_t end_ = 0;        // the offset after the log's last message at the last load()
  std::int64_t unreadable_ = 0;
};

}  // namespace pillbox::broker
