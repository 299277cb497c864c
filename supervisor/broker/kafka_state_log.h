#pragma once
// What operators did with the records of the fleet's quarantine on Kafka
// (discard, allow, reproduce's verdict): a topic can change no record, so
// each change is a record of its own in the topic T.dlq.state, the record
// named by its id "P@O" in T.dlq: the state log of fleet_state_log.h (its
// entries, versions and compare and set by reading back), on a topic.
//
// One partition, partition 0: which version N + 1 of a record wins is
// decided by the log's order, and Kafka orders records within a partition
// only, so every reader sees one order only in one partition. An entry is
// appended by an idempotent producer (acks=all) and counts once its
// delivery report names its offset; the compare and set then reads the
// partition from where its load ended up to the high watermark, which is
// past that offset, so the entry is always read back. What another client
// wrote to other partitions is not read.
//
// The topic must keep every entry: cleanup.policy=delete with
// retention.ms=-1 (a state removed by retention is a record back to
// "quarantined"), never compacted (a record has several versions under one
// id, which compaction would collapse to one, and the first of each
// version would no longer be the one every reader saw). It is not created
// by pillbox (no client names a missing topic: kafka_topics.h); a change
// on a cluster without it says how to create it.
#include <memory>
#include <string>

#include "shared/status.h"
#include "supervisor/broker/fleet_state_log.h"
#include "supervisor/broker/kafka_config.h"
#include "supervisor/broker/kafka_partition_reader.h"

namespace pillbox::broker {

class KafkaProducer;

// T.dlq.state
std::string kafka_state_log_topic(const std::string& topic);

class KafkaStateLog final : public StateLogAccess {
 public:
  // `reader` outlives this; `topic` is T.
  KafkaStateLog(KafkaPartitionReader& reader, const std::string& topic);
  ~KafkaStateLog() override;
  KafkaStateLog(const KafkaStateLog&) = delete;
  KafkaStateLog& operator=(const KafkaStateLog&) = delete;

  std::string name() const override { return name_; }
  // 0 when the topic does not exist (nobody acted on a record yet).
  Expected<std::int64_t> end() override;
  Status read(std::int64_t from, std::int64_t to, const std::function<bool(const StateLogEntry&)>& stop) override;
  // The topic exists (else a setup error that says how to create it), and
  // a producer is started.
  Status prepare() override;
  Status append(const std::string& body, const std::string& writer) override;

 private:
  KafkaPartitionReader& reader_;
  std::string name_;
  std::unique_ptr<KafkaProducer> producer_;
};

}  // namespace pillbox::broker
