#pragma once
// The payload logs of the fleet's quarantine on Kafka (fleet_payload_log.h):
// a topic can change no record, so each payload kept apart from its dead
// letter is a record of its own, appended to partition 0 of
//
//   T.dlq.minimized  minimize's best payloads and results; header pillbox-minimized-of: the record's id P@O
//   T.dlq.revisions  `quarantine patch`'s revisions; header pillbox-revision-of
//
// and read back by offset with a consumer that joins no group
// (kafka_partition_reader.h). One partition: a payload is found again by
// the offset its record's state names, and an offset means something in
// one partition only.
//
// The topics are not created by pillbox (no client names a missing topic:
// kafka_topics.h); an append to a cluster without one says how to create
// it: one partition, cleanup.policy=delete (never compacted: records carry
// no key to compact by, and each is named by its offset), a retention no
// shorter than T.dlq's.
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <string_view>

#include "shared/status.h"
#include "supervisor/broker/fleet_payload_log.h"
#include "supervisor/broker/kafka_partition_reader.h"

namespace pillbox::broker {

class KafkaProducer;

// T.dlq.minimized, T.dlq.revisions
std::string kafka_minimized_topic(const std::string& topic);
std::string kafka_revisions_topic(const std::string& topic);

class KafkaPayloadLog final : public PayloadLog {
 public:
  // `reader` outlives these; `topic` is T.
  static std::unique_ptr<KafkaPayloadLog> minimized(KafkaPartitionReader& reader, const std::string& topic);
  static std::unique_ptr<KafkaPayloadLog> revisions(KafkaPartitionReader& reader, const std::string& topic);
  ~KafkaPayloadLog() override;
  KafkaPayloadLog(const KafkaPayloadLog&) = delete;
  KafkaPayloadLog& operator=(const KafkaPayloadLog&) = delete;

  const std::string& name() const override { return name_; }
  // The topic must exist (else a setup error that says how to make it);
  // written by an idempotent producer, the offset its delivery report names.
  Expected<std::int64_t> append(const std::string& id, std::string_view bytes) override;
  // A value over `most` is not kept (cut while read).
  Expected<std::optional<KeptPayloadEntry>> entry_at(std::int64_t offset, std::uint64_t most,
                                                     std::string& why_not) override;

 private:
  KafkaPayloadLog(KafkaPartitionReader& reader, std::string name, std::string of_header);

  KafkaPartitionReader& reader_;
  std::string name_;
  std::string of_header_;
  std::unique_ptr<KafkaProducer> producer_;  // opened by the first append
};

}  // namespace pillbox::broker
