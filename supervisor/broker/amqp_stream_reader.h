#pragma once
// A RabbitMQ stream queue (NAME.dlq) read by offset, without consuming it:
// each read is a consume that starts at an offset (x-stream-offset) and is
// cancelled once it has what it came for. A stream keeps every message
// whoever reads it; the acks are credit only. So a listing neither
// consumes, reorders nor re-counts the dead letters (issue 28, point 3).
//
// Where a stream ends is not said over AMQP 0-9-1: queue.declare's message
// count is not the stream's. So end() consumes from "last" (the first
// message of the newest chunk) and takes the end to be after the last
// message handed over before the broker falls quiet for `quiet`, or 2 s
// after the first (a publisher that writes more often than `quiet` would
// keep it from falling quiet: what comes later is newer than the read): the
// one read here that waits for nothing to come. Every other read knows where it
// stops: offsets rise one by one, so a read of [from, to) ends at the first
// offset at or past to - 1 (what retention removed is skipped by the
// broker, which starts a read before the first offset at the first).
//
// Offsets come from the broker's x-stream-offset header; a read that is
// handed one that does not rise, or none, stops with an error: they are
// what record ids are made of. Bodies over `kept_body_bytes` are read and
// dropped (AmqpMessage::body_omitted).
#include <chrono>
#include <cstdint>
#include <functional>
#include <string>

#include "shared/status.h"
#include "supervisor/broker/amqp_connection.h"

namespace pillbox::broker {

// A message's x-stream-offset, or -1 when it has none that is a number >= 0.
std::int64_t stream_offset(const AmqpMessage& message);

class AmqpStreamReader {
 public:
  // `connection` outlives this; reads use its channel one at a time.
  AmqpStreamReader(AmqpConnection& connection, std::string queue, std::uint64_t kept_body_bytes);

  // The offset after the newest message now (0 for an empty stream).
  // Waits for the first message at most the connection's timeout once the
  // queue says it holds any, and after each for `quiet`, 2 s in all after
  // the first.
  Expected<std::int64_t> end(std::chrono::milliseconds quiet = std::chrono::milliseconds(300));

  // The messages at offsets [from, to), oldest first, to `fn` (false
  // stops); `to` at most end()'s. Those retention removed are not there.
  Status read(std::int64_t from, std::int64_t to, const std::function<bool(AmqpMessage&&)>& fn);

  // The messages from offset `from` on, oldest first, to `fn` until it
  // returns false: for a message known to be there (a publish the broker
  // confirmed); nothing for 5 s is an error.
  Status read_on(std::int64_t from, const std::function<bool(AmqpMessage&&)>& fn);

  // The messages from offset `from` on that are there or come within
  // `most`, oldest first, to `fn`: a wait for what others append (a
  // consume from an offset past the end waits for it). Returns the offset
  // after the last one handed over (`from` when none came).
  Expected<std::int64_t> read_new(std::int64_t from, std::chrono::milliseconds most,
                                  const std::function<void(AmqpMessage&&)>& fn);

  const std::string& queue() const { return queue_; }

 private:
  // Consumes from `offset` ("first", "last", or a number).
  Status start(const AmqpValue& offset);
  // Cancels the consume; what it was handed meanwhile is dropped.
  Status stop();
  // read() and read_on(): `to` < 0 reads on until `fn` says stop.
  Status walk(std::int64_t from, std::int64_t to, const std::function<bool(AmqpMessage&&)>& fn);

  AmqpConnection& c_;
  std::string queue_;
};

}  // namespace pillbox::broker
