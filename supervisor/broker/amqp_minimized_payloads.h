#pragma once
// The payloads `pillbox minimize --amqp` keeps (its best so far, the
// minimized one) for the records of the fleet's quarantine on RabbitMQ: a
// stream can change no message and RabbitMQ keeps no values, so each is a
// message of its own in the stream queue NAME.dlq.minimized, appended,
// never changed, read by offset:
//
//   body     the payload's exact bytes
//   header   pillbox-minimized-of: the record's offset in NAME.dlq
//   header   pillbox-writer: the appending process's random id
//
// A record's state (NAME.dlq.state) names the offset and the sha256 of
// each (FleetState::minimize_best_at, minimized_at): a payload is that
// record's only when the message there says so and its bytes have that
// sha256. Apart from the state log because that log is read whole by every
// change and every listing: payloads there would make each discard read
// every payload ever minimized.
//
// As trusted as NAME.dlq.state (whoever may publish to one can write the
// other): what is read is checked, never signed. Give it a retention no
// shorter than NAME.dlq's: a payload removed is a minimization that starts
// over, or an export --minimized that says it is gone.
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

#include "shared/status.h"
#include "supervisor/broker/amqp_connection.h"
#include "supervisor/broker/fleet_record.h"

namespace pillbox::broker {

// NAME.dlq.minimized
std::string amqp_minimized_name(const std::string& queue);

class AmqpMinimizedPayloads {
 public:
  // `connection` outlives this; `queue` is NAME.
  AmqpMinimizedPayloads(AmqpConnection& connection, const std::string& queue);

  // Appends `bytes` as a payload of record `id` (declaring the stream when
  // it is missing), confirmed; returns its offset.
  Expected<std::int64_t> append(const std::string& id, std::string_view bytes);

  // The payload at `offset` when it is a minimization of `record`: the
  // message says it is that record's, its bytes have sha256 `sha256` and
  // are no more than the record's own payload (larger ones are read off
  // the socket, not kept). Else nullopt, with `why_not` saying which it is
  // not (no such offset, or no stream; removed by retention; another
  // record's; too large; other bytes). Errors: the broker cannot be used.
  Expected<std::optional<std::string>> read(std::int64_t offset, const FleetRecord& record, const std::string& sha256,
                                            std::string& why_not);

  const std::string& name() const { return name_; }

 private:
  AmqpConnection& c_;
  std::string name_;
  std::int64_t end_ = -1;  // the stream's end as last found (it only grows); -1: not looked at yet
};

}  // namespace pillbox::broker
