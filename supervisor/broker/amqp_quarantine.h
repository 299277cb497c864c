#pragma once
// The fleet's quarantine on RabbitMQ: the dead letters in the stream queue
// NAME.dlq (amqp_dead_letter.h), read by offset (amqp_stream_reader.h) and
// shown by the quarantine verbs given --amqp URL --queue NAME as the store's
// records and Redis's are (fleet_dead_letters.h). A record's id is its
// offset in NAME.dlq: a listing neither consumes, reorders nor re-counts the
// dead letters, and an id stays the record's for as long as the stream
// keeps it.
//
// What operators do with a record (discard, reproduce's verdict) is kept
// beside the stream, in the log NAME.dlq.state (amqp_state_log.h). Replay
// and minimize are not built yet on RabbitMQ: refused before anything is
// read (QuarantineCapabilities::replays, minimizes).
//
// What a dead letter says is a claim (anyone who may publish to NAME.dlx
// can write one): a dead letter pillbox wrote has a record (signed, with
// --fleet-key); one RabbitMQ wrote itself (past x-delivery-limit: the
// payload killed every worker's supervisor; or rejected, expired) has the
// broker's first death only, read from x-first-death-*, which on a pillbox
// dead letter would be forged and is not shown. `pillbox doctor`'s
// canaries (is_canary) are left out of listings, and left_out() says how
// many: a publisher to NAME can make a message look like one.
//
// Errors: an id that is not an offset, or no dead letter at it, is a usage
// error; a broker that cannot be reached, a NAME.dlq that is missing or no
// stream, a setup error.
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <string>

#include "shared/status.h"
#include "supervisor/broker/amqp_connection.h"
#include "supervisor/broker/amqp_state_log.h"
#include "supervisor/broker/amqp_topology.h"
#include "supervisor/broker/fleet_dead_letters.h"

namespace pillbox::broker {

// A record id as operators type it: an offset in NAME.dlq (a whole number,
// written without leading zeros); a usage error otherwise.
Expected<std::string> parse_amqp_record_id(const std::string& text);

class AmqpQuarantine final : public FleetDeadLetters {
 public:
  // Connects, and checks that NAME.dlq exists and is a stream queue.
  static Expected<AmqpQuarantine> open(const AmqpAddress& address, const std::string& queue);

  static constexpr QuarantineCapabilities kCapabilities{.signatures = true, .replays = false, .minimizes = false};
  QuarantineCapabilities can() const override { return kCapabilities; }
  std::string where() const override;
  std::string hint_options() const override { return " --amqp URL --queue " + names_.work; }
  int id_width() const override { return 8; }
  Expected<std::string> parse_id(const std::string& text) const override { return parse_amqp_record_id(text); }
  nlohmann::json id_json(const std::string& id) const override;
  void use_key(std::optional<FleetKey> key) override { key_ = std::move(key); }

  // Newest first, 128 offsets at a time; payloads over 64 KiB are not kept
  // (payload_omitted). Canaries are left out and counted (left_out()).
  Status each(const std::function<bool(const FleetRecord&)>& fn) override;
  Expected<FleetRecord> get(const std::string& id) override;
  std::string left_out() const override;

  store::AuditEntry dead_lettering(const FleetRecord& record) const override;
  // "amqp": the work queue, the message id, the offset, the broker's own
  // first death, x-death and the original's properties as pillbox kept them.
  void add_broker_json(const FleetRecord& record, nlohmann::json& full) const override;

  // A compare and set of its state in NAME.dlq.state (no replay holds a
  // record here yet: refuse_while_replaying has nothing to refuse).
  Expected<FleetRecord> change_state(const std::string& id, bool refuse_while_replaying,
                                     const StateChange& change) override;
  // Not built yet on RabbitMQ (kCapabilities): each says so.
  Expected<PayloadBytes> minimized_payload(const FleetRecord& record) override;
  std::unique_ptr<MinimizeKeeper> minimize_keeper(const std::string& id, const std::string& actor) override;
  Expected<std::vector<FleetRecord>> redrive_plan(const ReplayRun& run, std::vector<std::string>& skipped) override;
  Expected<ReplayResult> redrive(const ReplayRun& run) override;

 private:
  AmqpQuarantine(AmqpConnection connection, AmqpQueueNames names)
      : c_(std::make_unique<AmqpConnection>(std::move(connection))), names_(std::move(names)) {}
  FleetRecord record_of(const AmqpMessage& message) const;
  // The dead letter at offset `id`, without its state (get() adds it).
  Expected<FleetRecord> dead_letter_at(const std::string& id);
  // Every record's state (NAME.dlq.state), or why it cannot be read.
  Expected<std::map<std::string, AmqpRecordState>> states();
  Error not_yet(const std::string& what) const;

  std::unique_ptr<AmqpConnection> c_;
  AmqpQueueNames names_;
  std::optional<FleetKey> key_;
  std::int64_t canaries_ = 0;  // left out by the last each()
  std::int64_t unreadable_states_ = 0;  // NAME.dlq.state's messages that are not pillbox's
};

}  // namespace pillbox::broker
