#pragma once
// The fleet's quarantine on Kafka: the dead letters the workers of topic T
// wrote to T.dlq (kafka_dead_letter.h), shown by the quarantine verbs given
// --kafka BROKERS --topic T as the store's, Redis's and RabbitMQ's records
// are (fleet_dead_letters.h). A record's id is where its letter is in T.dlq,
// "P@O" (kafka_fleet_record.h): a listing reads every partition of T.dlq
// from the beginning with a consumer that joins no group and commits
// nothing (kafka_partition_reader.h), so it neither consumes, reorders nor
// re-counts the letters, and an id stays the record's for as long as T.dlq
// keeps it.
//
// Newest first: T.dlq's partitions are read backwards, a window of
// offsets at a time each, and merged by the letters' timestamps (the
// worker's produce time; ties: the lower partition first). A payload over
// 64 KiB is left out of a listing (payload_omitted): each letter is read
// whole (its signature covers it) and its bytes dropped once its record is
// made, so a listing holds at most a window per partition (64 letters of
// at most 64 KiB each, plus pillbox's headers).
//
// Copies (kafka_fleet_record.h): pillbox settles at least once, so a
// record can be dead-lettered twice; the letters after the first of each
// dedupe key, value and signature class are left out of listings and
// counted (left_out()), and `show` of one names its record. Read oldest
// first, partition by partition: copies share one.
//
// What operators do with a record (discard, allow, reproduce's verdict)
// is kept beside T.dlq, in the state log T.dlq.state (kafka_state_log.h).
//
// replay republishes records to T (kafka_redrive.h): a record is
// `replaying` while a replay's lease in its state runs, and the dead letter
// of a republished record that fails again is an attempt of the record it
// replayed, left out of listings (counted in left_out()) and named by that
// record's state, not a record of its own.
//
// What a letter says is a claim: anyone allowed to produce to T.dlq can
// write one. One without a valid signature shows as such (with
// --fleet-key), never hides a signed one, and is not run without
// --trust-unsigned.
//
// Errors: an id that is not P@O, or no letter there, is a usage error; a
// cluster that cannot be reached or a missing T.dlq, a setup error.
#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <set>
#include <string>

#include "shared/status.h"
#include "supervisor/broker/fleet_dead_letters.h"
#include "supervisor/broker/kafka_config.h"
#include "supervisor/broker/kafka_dead_letter.h"
#include "supervisor/broker/kafka_partition_reader.h"
#include "supervisor/broker/kafka_state_log.h"

namespace pillbox::broker {

class KafkaQuarantine final : public FleetDeadLetters {
 public:
  // Connects, and finds T.dlq.
  static Expected<KafkaQuarantine> open(const KafkaBootstrap& bootstrap, const std::string& topic);

  // Whether the cluster answers and still has T.dlq (a round trip: the
  // console's check of its connection).
  bool answers();
  const KafkaBootstrap& bootstrap() const { return reader_->bootstrap(); }
  const std::string& topic() const { return topic_; }

  static constexpr QuarantineCapabilities kCapabilities{.signatures = true, .patches = true, .replay_outputs = false};
  QuarantineCapabilities can() const override { return kCapabilities; }
  std::string where() const override;
  std::string hint_options() const override;
  int id_width() const override { return 10; }
  Expected<std::string> parse_id(const std::string& text) const override;
  void use_key(std::optional<FleetKey> key) override { key_ = std::move(key); }
  const FleetKey* key() const override { return key_ ? &*key_ : nullptr; }
  std::string signed_name() const override { return kafka_dlq_topic(topic_); }

  Status each(const std::function<bool(const FleetRecord&)>& fn) override;
  Expected<FleetRecord> get(const std::string& id) override;
  std::string left_out() const override;

  store::AuditEntry dead_lettering(const FleetRecord& record) const override;
  // "kafka": where the letter is, its source and dedupe key, the
  // original's headers as carried (kafka_fleet_record.h).
  void add_broker_json(const FleetRecord& record, nlohmann::json& full) const override;

  // A compare and set of its state in T.dlq.state; with
  // `refuse_while_replaying`, refused while a replay's lease runs.
  Expected<FleetRecord> change_state(const std::string& id, bool refuse_while_replaying,
                                     const StateChange& change) override;
  Expected<PayloadBytes> minimized_payload(const FleetRecord& record) override;
  std::unique_ptr<MinimizeKeeper> minimize_keeper(const std::string& id, const std::string& actor) override;
  Expected<std::int64_t> keep_revision_payload(const FleetRecord& record, std::string_view bytes) override;
  Expected<std::string> revision_payload(const FleetRecord& record, const FleetRevision& revision) override;
  Expected<std::vector<FleetRecord>> redrive_plan(const ReplayRun& run, std::vector<std::string>& skipped) override;
  Expected<ReplayResult> redrive(const ReplayRun& run) override;

  // What the replay (kafka_redrive.cpp) uses: the reader, the letter at
  // `id` as it is in T.dlq (copy or attempt), and a letter as a record (no
  // state applied).
  KafkaPartitionReader& reader() { return *reader_; }
  Expected<KafkaMessage> letter(const std::string& id);
  FleetRecord letter_record(const KafkaMessage& letter) const { return record_of(letter, ~std::size_t{0}); }

 private:
  KafkaQuarantine(std::unique_ptr<KafkaPartitionReader> reader, std::string topic, int partitions)
      : reader_(std::move(reader)),
        topic_(std::move(topic)),
        partitions_(partitions),
        state_log_(std::make_unique<KafkaStateLog>(*reader_, topic_)) {}
  // Every record's state (T.dlq.state), or why it cannot be read.
  Expected<RecordStates> states();
  // The letter at `id` as a record, without its state; errors as get()'s.
  Expected<FleetRecord> dead_letter_at(const std::string& id);
  // A letter of T.dlq as a record (no state applied); its payload left out
  // when over `max_payload`.
  FleetRecord record_of(const KafkaMessage& letter, std::size_t max_payload) const;
  // Reads partition `p` of T.dlq from where the last call stopped up to
  // `end`, oldest first, and notes each copy with its record's id.
  Status find_copies(std::int32_t p, std::int64_t end);
  // The record `id` is a copy of, or "" (find_copies read it already).
  std::string copy_of(const std::string& id) const;
  // The record `letter` is the dead letter of a replay of, by `states`
  // ("": it is no attempt: kafka_redrive.h says when it is one).
  static std::string attempt_of(const KafkaMessage& letter, const RecordStates& states);

  std::unique_ptr<KafkaPartitionReader> reader_;
  std::string topic_;  // T
  int partitions_ = 0;  // T.dlq's
  std::optional<FleetKey> key_;
  std::unique_ptr<KafkaStateLog> state_log_;  // over *reader_
  std::int64_t copies_ = 0;  // left out by the last each()
  std::int64_t attempts_ = 0;  // replays' dead letters left out by the last each()
  std::int64_t unreadable_states_ = 0;  // T.dlq.state's entries that are not pillbox's, at the last read
  // find_copies's, by partition: where it stopped, each copy key's first
  // letter, and each copy's record. A partition only grows at its end, so
  // what was read stays true.
  std::map<std::int32_t, std::int64_t> scanned_to_;
  std::map<std::int32_t, std::map<std::string, std::int64_t>> first_of_;
  std::map<std::string, std::string> copy_of_;
};

}  // namespace pillbox::broker
