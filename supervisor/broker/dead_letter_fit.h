#pragma once
// A worker's dead-letter record (stream_entry.h's dead_letter_record) cut to
// fit where a broker carries it in one header: RabbitMQ's frame
// (amqp_entry.h), Kafka's record (kafka_dead_letter.h). A record left out
// whole would leave an operator not knowing what failed, so its details go
// first, and what was cut is said in it. Pure.
#include <cstddef>
#include <string>
#include <string_view>

namespace pillbox::broker {

// Where a broker's dead letter has headers (RabbitMQ, Kafka), the header
// that carries its record, as the Redis fleet's `record` field.
inline constexpr std::string_view kRecordHeader = "pillbox-record";

// `record` (JSON) within `limit` bytes (at least 1 KiB). What goes first:
// the details of the earlier deliveries (their message and crash state),
// the stderr tail, then the earlier deliveries are written short, then the
// oldest of them are left out (counted in attempts_omitted); a key or
// message of more than kMaxRecordedMessage bytes is cut (the broker's own
// key has it whole). What was cut is said in `cut`, with `to_fit` naming
// the bound ("one AMQP frame"). A record that fits, or is not a JSON
// object, comes back as it is.
std::string fitted_record(const std::string& record, std::size_t limit, std::string_view to_fit);

}  // namespace pillbox::broker
