#include "supervisor/broker/amqp_stream_reader.h"

#include <algorithm>
#include <optional>
#include <utility>

namespace pillbox::broker {
namespace {

// Messages handed over before an ack: the credit of one read. A window of
// a listing is 128; more in flight only adds what is dropped at the stop.
constexpr std::uint16_t kPrefetch = 64;
// end()'s read of the newest chunk, from its first message on, at most.
constexpr std::chrono::milliseconds kMostReading{2000};

}  // namespace

std::int64_t stream_offset(const AmqpMessage& message) {
  const AmqpValue* v = find_field(message.headers, "x-stream-offset");
  if (v == nullptr) return -1;
  const auto n = v->integer();
  return n && *n >= 0 ? *n : -1;
}

AmqpStreamReader::AmqpStreamReader(AmqpConnection& connection, std::string queue, std::uint64_t kept_body_bytes)
    : c_(connection), queue_(std::move(queue)) {
  c_.keep_bodies_up_to(kept_body_bytes);
}

Status AmqpStreamReader::start(const AmqpValue& offset) {
  return c_.consume(queue_, kPrefetch, {{"x-stream-offset", offset}});
}

Status AmqpStreamReader::stop() {
  auto dropped = c_.cancel_consume();
  if (!dropped) return Status::error(dropped.error());
  return Status::ok();
}

Expected<std::int64_t> AmqpStreamReader::end(std::chrono::milliseconds quiet) {
  auto state = c_.check_queue(queue_);
  if (!state) return Error{state.error(), state.error_code()};
  if (auto s = start(AmqpValue("last")); !s) return Error{s.message()};
  std::int64_t last = -1;
  // The first message of the newest chunk may take a disk read: while the
  // queue says it holds any, it is waited for as any answer is.
  auto wait = state->messages > 0 ? std::chrono::milliseconds(5000) : quiet;
  // A publisher that writes more often than `quiet` would keep the stream
  // from ever falling quiet: once the first message is in, the read ends
  // after kMostReading at the latest, at the last offset it was handed (what
  // comes later is newer than this read).
  std::optional<std::chrono::steady_clock::time_point> give_up;
  for (;;) {
    if (give_up && std::chrono::steady_clock::now() >= *give_up) break;
    auto m = c_.next(wait);
    if (!m) return Error{m.error()};
    if (!m->has_value()) break;
    const std::int64_t offset = stream_offset(**m);
    if (offset < 0 || offset <= last) {
      return Error{"RabbitMQ at " + c_.address().describe() + ": " + queue_ + " handed over a message at offset " +
                   std::to_string(offset) + " after " + std::to_string(last) +
                   " (is it a stream queue? a stream's offsets rise one by one)"};
    }
    last = offset;
    if (auto a = c_.ack((*m)->delivery_tag); !a) return Error{a.message()};
    if (!give_up) give_up = std::chrono::steady_clock::now() + kMostReading;
    wait = quiet;
  }
  if (auto s = stop(); !s) return Error{s.message()};
  return last + 1;
}

Status AmqpStreamReader::read(std::int64_t from, std::int64_t to, const std::function<bool(AmqpMessage&&)>& fn) {
  if (from >= to) return Status::ok();
  return walk(from, to, fn);
}

Status AmqpStreamReader::read_on(std::int64_t from, const std::function<bool(AmqpMessage&&)>& fn) {
  return walk(from, -1, fn);
}

Expected<std::int64_t> AmqpStreamReader::read_new(std::int64_t from, std::chrono::milliseconds most,
                                                  const std::function<void(AmqpMessage&&)>& fn) {
  if (auto s = start(AmqpValue(std::int64_t{from})); !s) return Error{s.message()};
  const auto deadline = std::chrono::steady_clock::now() + most;
  std::int64_t last = from - 1;
  for (;;) {
    const auto left =
        std::chrono::duration_cast<std::chrono::milliseconds>(deadline - std::chrono::steady_clock::now());
    if (left.count() <= 0) break;
    auto m = c_.next(left);
    if (!m) return Error{m.error()};
    if (!m->has_value()) break;
    const std::int64_t offset = stream_offset(**m);
    if (offset < 0 || (offset <= last && offset >= from)) {
      return Error{"RabbitMQ at " + c_.address().describe() + ": " + queue_ + " handed over a message at offset " +
                   std::to_string(offset) + " after " + std::to_string(last) +
                   " (is it a stream queue? a stream's offsets rise one by one)"};
    }
    if (auto a = c_.ack((*m)->delivery_tag); !a) return Error{a.message()};
    if (offset < from) continue;  // its chunk's start, before `from`
    last = offset;
    fn(std::move(**m));
  }
  if (auto s = stop(); !s) return Error{s.message()};
  return last + 1;
}

Status AmqpStreamReader::walk(std::int64_t from, std::int64_t to, const std::function<bool(AmqpMessage&&)>& fn) {
  if (auto s = start(AmqpValue(std::int64_t{from})); !s) return s;
  std::int64_t last = from - 1;
  for (;;) {
    // Each message within the connection's timeout: what is read is known
    // to be there (to <= end(), or a publish the broker confirmed), so
    // silence means the stream went away.
    auto m = c_.next(std::chrono::milliseconds(5000));
    if (!m) return Status::error(m.error());
    if (!m->has_value()) {
      return Status::error("RabbitMQ at " + c_.address().describe() + ": " + queue_ + " handed over nothing after offset " +
                           std::to_string(last) + " for 5 s, though " +
                           (to >= 0 ? "it held offsets up to " + std::to_string(to - 1)
                                    : std::string("a message it confirmed was still to come")) +
                           " (was it deleted, or declared again?)");
    }
    const std::int64_t offset = stream_offset(**m);
    // Before `from` is the broker's chunk start: a consume from an offset
    // may start at its chunk's first message.
    if (offset < 0 || (offset <= last && offset >= from)) {
      return Status::error("RabbitMQ at " + c_.address().describe() + ": " + queue_ + " handed over a message at offset " +
                           std::to_string(offset) + " after " + std::to_string(last) +
                           " (is it a stream queue? a stream's offsets rise one by one)");
    }
    if (auto a = c_.ack((*m)->delivery_tag); !a) return a;
    if (offset < from) continue;
    last = offset;
    if (to >= 0 && offset >= to) break;
    if (!fn(std::move(**m))) break;
    if (to >= 0 && offset >= to - 1) break;
  }
  return stop();
}

}  // namespace pillbox::broker
