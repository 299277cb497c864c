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
// beside the stream, in the log NAME.dlq.state (amqp_state_log.h). A
// replay (amqp_redrive.h) locks a record with the queue NAME.dlq.lock.ID:
// while that exists the record reads `replaying`. The dead letter of a
// replayed message that failed again is an attempt of the record it
// replayed, not a record: it carries the replay's tag
// (amqp_replay_notice.h), and the record's state names that attempt.
// Minimize keeps its progress in the record's state and its payloads in
// the stream NAME.dlq.minimized (fleet_log_minimize_keeper.h); patch, the
// revisions' payloads in the stream NAME.dlq.revisions (fleet_revisions.h).
//
// A message can be dead-lettered twice: a settle is publish, confirm, then
// ack, and RabbitMQ can lose the ack (a broker killed before the ack
// reached its disk), so the message comes back and is dead-lettered again,
// or its retry copy and the message itself both run on and both fail. A
// dead letter with the message id, payload and signature verdict of an
// earlier one is a copy of that record, not a record: listings leave it out
// and say how many (left_out()), `show` of its offset names the record. The
// signature is part of it (its verdict, or without the fleet key whether
// there is one) so that a forged letter that came first never hides a
// signed one behind it.
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
#include <set>
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
  // The same on `connection`, taken only when it succeeds: on an error it
  // is left to the caller, whose broken() says whether the broker went
  // away or answered (no NAME.dlq, or one of another type).
  static Expected<AmqpQuarantine> open(AmqpConnection& connection, const std::string& queue);

  static constexpr QuarantineCapabilities kCapabilities{.signatures = true, .patches = true, .replay_outputs = false};
  QuarantineCapabilities can() const override { return kCapabilities; }
  std::string where() const override;
  std::string hint_options() const override { return " --amqp URL --queue " + names_.work; }
  int id_width() const override { return 8; }
  Expected<std::string> parse_id(const std::string& text) const override { return parse_amqp_record_id(text); }
  nlohmann::json id_json(const std::string& id) const override;
  void use_key(std::optional<FleetKey> key) override { key_ = std::move(key); }
  const FleetKey* key() const override { return key_ ? &*key_ : nullptr; }
  std::string signed_name() const override { return names_.dlq; }

  // Newest first, 128 offsets at a time; payloads over 64 KiB are not kept
  // (payload_omitted). Canaries are left out and counted (left_out()).
  Status each(const std::function<bool(const FleetRecord&)>& fn) override;
  Expected<FleetRecord> get(const std::string& id) override;
  std::string left_out() const override;

  store::AuditEntry dead_lettering(const FleetRecord& record) const override;
  // "amqp": the work queue, the message id, the offset, the broker's own
  // first death, x-death and the original's properties as pillbox kept them.
  void add_broker_json(const FleetRecord& record, nlohmann::json& full) const override;

  // A compare and set of its state in NAME.dlq.state; with
  // `refuse_while_replaying`, refused while its lock exists (checked in each
  // round: a replay claims a record by the same compare and set).
  Expected<FleetRecord> change_state(const std::string& id, bool refuse_while_replaying,
                                     const StateChange& change) override;
  // At the offset of NAME.dlq.minimized its state names, checked
  // (amqp_payload_stream.h).
  Expected<PayloadBytes> minimized_payload(const FleetRecord& record) override;
  std::unique_ptr<MinimizeKeeper> minimize_keeper(const std::string& id, const std::string& actor) override;
  // A revision's payload appended to the stream NAME.dlq.revisions
  // (amqp_payload_stream.h), read back at the offset its state names.
  Expected<std::int64_t> keep_revision_payload(const FleetRecord& record, std::string_view bytes) override;
  Expected<std::string> revision_payload(const FleetRecord& record, const FleetRevision& revision) override;
  Expected<std::vector<FleetRecord>> redrive_plan(const ReplayRun& run, std::vector<std::string>& skipped) override;
  Expected<ReplayResult> redrive(const ReplayRun& run) override;

  // What the replay (amqp_redrive.cpp) uses.
  AmqpConnection& connection() { return *c_; }
  const AmqpQueueNames& names() const { return names_; }
  // A message of NAME.dlq read as a record (no state applied).
  FleetRecord record_of(const AmqpMessage& message) const;
  // The dead letter at offset `id` as it is in NAME.dlq; errors as get()'s.
  Expected<AmqpMessage> message_at(const std::string& id);
  // NAME.dlq.lock.ID, and whether a replay holds it now: this connection,
  // or another that has it exclusive. A queue of that name that is not
  // exclusive (declared by someone else, durable or not) is no replay's
  // lock: it locks nothing here, and a replay cannot take it (lock()).
  std::string lock_name(const std::string& id) const { return names_.dlq + ".lock." + id; }
  Expected<bool> locked(const std::string& id);
  // Takes record `id`'s lock, exclusive to this connection, and lets it go
  // (errors and refusal() as declare_exclusive_queue's and delete_queue's).
  Status lock(const std::string& id);
  Status unlock(const std::string& id);

 private:
  AmqpQuarantine(AmqpConnection connection, AmqpQueueNames names)
      : c_(std::make_unique<AmqpConnection>(std::move(connection))), names_(std::move(names)) {}
  // The dead letter at offset `id`, without its state (get() adds it).
  Expected<FleetRecord> dead_letter_at(const std::string& id);
  // Every record's state (NAME.dlq.state), or why it cannot be read.
  Expected<std::map<std::string, AmqpRecordState>> states();
  // `r` with its state (none: nobody acted on it) and, while its state
  // waits for a redrive, its lock.
  Status apply_record_state(FleetRecord& r, const AmqpRecordState* state);
  // Whether `m` (read as `r`) is the dead letter of a replay of another
  // record whose state names that attempt: then r.redrive_of names it.
  bool is_attempt(const AmqpMessage& m, FleetRecord& r, const std::map<std::string, AmqpRecordState>& states) const;
  // Reads NAME.dlq from where the last call stopped up to `end`, oldest
  // first, and notes each copy (above) with its record's offset.
  Status find_copies(std::int64_t end, const std::map<std::string, AmqpRecordState>& states);
  // The record `id` is a copy of, or "" (find_copies read it already).
  std::string copy_of(const std::string& id) const;

  std::unique_ptr<AmqpConnection> c_;
  AmqpQueueNames names_;
  std::optional<FleetKey> key_;
  std::int64_t canaries_ = 0;  // left out by the last each()
  std::int64_t copies_ = 0;    // left out by the last each()
  // find_copies's: where it stopped, the first offset of each message id,
  // payload and signature verdict, and each copy's record. A stream only
  // grows at its end, so what was read stays true (until retention removes
  // a record: its copies stay copies for this connection's life).
  std::int64_t scanned_to_ = 0;
  std::map<std::string, std::int64_t> first_of_;
  std::map<std::int64_t, std::int64_t> copy_of_;
  std::int64_t known_end_ = 0;  // NAME.dlq's end as last found (it only grows)
  std::int64_t unreadable_states_ = 0;  // NAME.dlq.state's messages that are not pillbox's
  std::set<std::string> own_locks_;  // the records whose lock this connection holds
};

}  // namespace pillbox::broker
