#pragma once
// The payload logs of the fleet's quarantine on RabbitMQ
// (fleet_payload_log.h): a stream can change no message and RabbitMQ
// keeps no values, so each payload is a message of its own in a stream
// queue, appended, never changed, read by offset:
//
//   NAME.dlq.minimized  header pillbox-minimized-of: the record's offset in NAME.dlq
//   NAME.dlq.revisions  header pillbox-revision-of
//
// The stream is declared by the first append.
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <string_view>

#include "shared/status.h"
#include "supervisor/broker/amqp_connection.h"
#include "supervisor/broker/fleet_payload_log.h"

namespace pillbox::broker {

// NAME.dlq.minimized, NAME.dlq.revisions
std::string amqp_minimized_name(const std::string& queue);
std::string amqp_revisions_name(const std::string& queue);

class AmqpPayloadStream final : public PayloadLog {
 public:
  // `connection` outlives these; `queue` is NAME.
  static std::unique_ptr<AmqpPayloadStream> minimized(AmqpConnection& connection, const std::string& queue);
  static std::unique_ptr<AmqpPayloadStream> revisions(AmqpConnection& connection, const std::string& queue);

  const std::string& name() const override { return name_; }
  // Declares the stream when it is missing; confirmed.
  Expected<std::int64_t> append(const std::string& id, std::string_view bytes) override;
  // A body over `most` is read off the socket, not kept.
  Expected<std::optional<KeptPayloadEntry>> entry_at(std::int64_t offset, std::uint64_t most,
                                                     std::string& why_not) override;

 private:
  AmqpPayloadStream(AmqpConnection& connection, std::string name, std::string of_header)
      : c_(connection), name_(std::move(name)), of_header_(std::move(of_header)) {}

  AmqpConnection& c_;
  std::string name_;
  std::string of_header_;  // the header naming the record
  std::int64_t end_ = -1;  // the stream's end as last found (it only grows); -1: not looked at yet
};

}  // namespace pillbox::broker
