#pragma once
// What operators did with the records of the fleet's quarantine on RabbitMQ
// (discard, reproduce's verdict): a stream can change no message, and
// RabbitMQ keeps no values, so each change is a message of its own in the
// stream queue NAME.dlq.state, the record named by its offset in NAME.dlq:
// the state log of fleet_state_log.h (its entries, versions and compare
// and set), on a stream. The workers' notices of redrives that ran ok
// (amqp_replay_notice.h) share the stream and are no states.
//
// Do not give the stream a retention policy: a state removed is a record
// back to "quarantined".
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <string>

#include "shared/status.h"
#include "supervisor/broker/amqp_connection.h"
#include "supervisor/broker/fleet_state_log.h"

namespace pillbox::broker {

// NAME.dlq.state
std::string amqp_state_log_name(const std::string& queue);

// Declares NAME.dlq.state, a stream queue (idempotent): by the workers
// with their topology (a replayed message's notice must route), and by
// whoever writes to it first. One of another type is a setup error worded
// by explain_mismatch.
Status declare_state_log(AmqpConnection& connection, const std::string& queue);

using AmqpRecordState = RecordStateVersion;

class AmqpStateLog {
 public:
  // `connection` outlives this; `queue` is NAME.
  AmqpStateLog(AmqpConnection& connection, const std::string& queue);
  ~AmqpStateLog();
  AmqpStateLog(const AmqpStateLog&) = delete;
  AmqpStateLog& operator=(const AmqpStateLog&) = delete;

  // Every record's state, from the log's first message (a missing log:
  // none yet).
  Expected<std::map<std::string, AmqpRecordState>> load() { return log_.load(); }
  // Applies `change` to record `id`'s state as a compare and set (up to
  // 16 tries against other writers); declares the log when it is missing.
  // Returns the state written.
  Expected<FleetState> change(const std::string& id, const std::function<Status(FleetState&)>& change) {
    return log_.change(id, change);
  }
  // State messages the last load() left out (not pillbox's).
  std::int64_t unreadable() const { return log_.unreadable(); }

 private:
  class Stream;  // NAME.dlq.state as fleet_state_log.h reads and appends to it
  std::unique_ptr<Stream> stream_;
  FleetStateLog log_;  // over *stream_
};

}  // namespace pillbox::broker
