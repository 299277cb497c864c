#pragma once
// Payloads kept for the records of the fleet's quarantine on RabbitMQ apart
// from their dead letters: a stream can change no message and RabbitMQ
// keeps no values, so each is a message of its own in a stream queue,
// appended, never changed, read by offset. Two of them, one reader:
//
//   NAME.dlq.minimized  `pillbox minimize --amqp`'s best payload so far and
//                       its result (amqp_minimize_keeper.h); header
//                       pillbox-minimized-of
//   NAME.dlq.revisions  `quarantine patch --amqp`'s revisions
//                       (fleet_revisions.h); header pillbox-revision-of
//
//   body     the payload's exact bytes
//   header   pillbox-minimized-of / pillbox-revision-of: the record's offset in NAME.dlq
//   header   pillbox-writer: the appending process's random id
//
// A record's state (NAME.dlq.state) names the offset and the sha256 of
// each (FleetState::minimize_best_at, minimized_at, FleetRevision::at): a
// payload is that record's only when the message there says so and its
// bytes have that sha256. Apart from the state log because that log is read
// whole by every change and every listing: payloads there would make each
// discard read every payload ever kept.
//
// As trusted as NAME.dlq.state (whoever may publish to one can write the
// other): what is read is checked; a revision is signed besides
// (fleet_revisions.h). Give both a retention no shorter than NAME.dlq's: a
// payload removed is a minimization that starts over, an export
// --minimized that says it is gone, or a revision that cannot be replayed.
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

#include "shared/status.h"
#include "supervisor/broker/amqp_connection.h"

namespace pillbox::broker {

// NAME.dlq.minimized, NAME.dlq.revisions
std::string amqp_minimized_name(const std::string& queue);
std::string amqp_revisions_name(const std::string& queue);

class AmqpPayloadStream {
 public:
  // `connection` outlives these; `queue` is NAME.
  static AmqpPayloadStream minimized(AmqpConnection& connection, const std::string& queue);
  static AmqpPayloadStream revisions(AmqpConnection& connection, const std::string& queue);

  // Appends `bytes` as a payload of record `id` (declaring the stream when
  // it is missing), confirmed; returns its offset.
  Expected<std::int64_t> append(const std::string& id, std::string_view bytes);

  // The payload at `offset` when it is one of record `id`'s: the message
  // says it is that record's, its bytes have sha256 `sha256` and are no
  // more than `most` bytes (`most_is` says what that bound is: "the
  // record's own payload"; larger ones are read off the socket, not kept).
  // Else nullopt, with `why_not` saying which it is not (no such offset, or
  // no stream; removed by retention; another record's; too large; other
  // bytes). Errors: the broker cannot be used.
  Expected<std::optional<std::string>> read(std::int64_t offset, const std::string& id, const std::string& sha256,
                                            std::uint64_t most, const std::string& most_is, std::string& why_not);

  const std::string& name() const { return name_; }

 private:
  AmqpPayloadStream(AmqpConnection& connection, std::string name, std::string of_header)
      : c_(connection), name_(std::move(name)), of_header_(std::move(of_header)) {}

  AmqpConnection& c_;
  std::string name_;
  std::string of_header_;  // the header naming the record
  std::int64_t end_ = -1;  // the stream's end as last found (it only grows); -1: not looked at yet
};

}  // namespace pillbox::broker
