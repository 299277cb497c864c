#pragma once
// What pillbox produces to Kafka (the attempt log's entries, results, dead
// letters), without blocking the dispatcher's thread: produce() queues a
// record and returns; its delivery report (the offset it got, or why it
// was not written) runs the record's callback in drain(), on the caller's
// thread, once the fd of wait_fd() was readable. See docs/distributed.md,
// Kafka.
//
// Idempotent (enable.idempotence: acks=all, retries without duplicates or
// reordering within a partition), so a report that says written means
// written on every in-sync replica. librdkafka retries a record on its
// own while the cluster is away, up to message.timeout.ms; a report that
// fails is final.
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "shared/status.h"
#include "shared/unique_fd.h"
#include "supervisor/broker/kafka_config.h"
#include "supervisor/broker/kafka_message.h"

struct rd_kafka_s;
struct rd_kafka_queue_s;

namespace pillbox::broker {

struct KafkaDelivered {
  std::int32_t partition = -1;
  std::int64_t offset = -1;
};

class KafkaProducer {
 public:
  using Done = std::function<void(const Expected<KafkaDelivered>& delivered)>;

  // `properties`: librdkafka's, as given (bootstrap.servers, client.id,
  // message.timeout.ms, ...); idempotence is this producer's own.
  static Expected<std::unique_ptr<KafkaProducer>> open(std::vector<std::pair<std::string, std::string>> properties);
  ~KafkaProducer();
  KafkaProducer(const KafkaProducer&) = delete;
  KafkaProducer& operator=(const KafkaProducer&) = delete;

  // Queues `m`; `done` runs in drain() with its report. An error now (and
  // `done` never runs): librdkafka refused it at once (larger than
  // message.max.bytes, its queue full, the client failed for good).
  Status produce(const KafkaOutgoing& m, Done done);
  // Readable when reports wait for drain().
  int wait_fd() const { return wake_.get(); }
  // Runs the callbacks of the reports that came. Never blocks.
  void drain();
  // Records produced whose report has not run yet.
  std::size_t outstanding() const { return outstanding_; }
  // Blocks until every report ran, at most `timeout_ms`; false when some
  // did not (for submit and tools, never on the dispatcher's thread).
  bool flush(int timeout_ms);
  // For tools, never on the dispatcher's thread: produces `m` and waits
  // for its report (and every earlier one), at most `timeout_ms`. nullopt:
  // no report in time (it may have been written); else the report, or why
  // it was refused at once.
  std::optional<Expected<KafkaDelivered>> produce_and_wait(const KafkaOutgoing& m, int timeout_ms);
  // A fatal error of the client ("" none): nothing more can be produced.
  std::string fatal_error() const;

 private:
  KafkaProducer() = default;
  friend struct KafkaProducerCallbacks;

  rd_kafka_s* rk_ = nullptr;
  rd_kafka_queue_s* queue_ = nullptr;  // the main queue: the reports
  UniqueFd wake_;
  std::size_t outstanding_ = 0;
  bool closing_ = false;  // reports of what is purged at the end run no callback
};

// A producer for the tools (the quarantine's logs, replay) as `client_id`:
// a report within kKafkaDeliveryTimeout; `extra` properties after.
Expected<std::unique_ptr<KafkaProducer>> open_kafka_tool_producer(const KafkaBootstrap& bootstrap,
                                                                  const std::string& client_id,
                                                                  const KafkaProperties& extra = {});

}  // namespace pillbox::broker
