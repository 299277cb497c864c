#pragma once
// The Kafka worker's consumer of its topic, in its group, driven from the
// dispatcher's thread without ever blocking it (docs/distributed.md, Kafka).
//
// Why no link thread, as Redis and RabbitMQ have (connection_link.h):
// librdkafka already runs the connections, reconnects and heartbeats on
// threads of its own and hands back what came through a queue; the queue
// makes a file descriptor readable when it has something
// (rd_kafka_queue_io_event_enable), which the dispatcher's wait watches.
// pump() then takes everything the queue holds (the fd is raised only when
// an empty queue gets something, so it must be emptied each time) into a
// buffer per partition. A partition whose buffer is full (`max_buffered`
// records, or its share of `max_buffered_bytes`) is paused: librdkafka
// fetches no more of it. It is resumed only once its buffer is down to half
// of both: each pause drops what librdkafka had read ahead of it, and a
// pause and resume every few records (a small buffer, no hysteresis) did
// that for nearly every fetch (23 tasks/s on the mock, bench/
// worker_throughput.sh; docs/distributed.md, Kafka: throughput).
//
// Rebalances run inside pump(), as librdkafka's callback, with the eager
// protocol (librdkafka's default assignors, range and roundrobin): every
// member gives up everything, then gets its share, and the group waits
// for every member's revoke before it hands anything out again. So a
// revoke handler that writes what must be known before another member
// takes the partition (the worker: a release of each task it started)
// and waits for the cluster to acknowledge it, is read by the next owner.
// Its assign handler hears each partition's committed offset with the
// commit's metadata (where the attempt log is to be read from), read
// before anything of it is fetched, and says which partitions start
// paused. The C API, not the C++ one: librdkafka 2.0.2's C++ API has no
// commit metadata.
#include <cstdint>
#include <deque>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "shared/status.h"
#include "shared/unique_fd.h"
#include "supervisor/broker/kafka_message.h"

struct rd_kafka_s;
struct rd_kafka_queue_s;
struct rd_kafka_topic_partition_list_s;

namespace pillbox::broker {

// What the group committed for a partition: the next offset to read
// (kNoCommittedOffset: none yet) and the commit's metadata.
inline constexpr std::int64_t kNoCommittedOffset = -1001;  // RD_KAFKA_OFFSET_INVALID
struct KafkaCommitted {
  std::int64_t offset = kNoCommittedOffset;
  std::string metadata;
  // The group's answer came: false, it could not be read (the partition
  // starts paused: unknown is not "none", which would run again from the
  // start what was settled). read_committed() asks again.
  bool known = true;
};

struct KafkaConsumerSettings {
  // librdkafka's properties as given (bootstrap.servers, client.id, ...);
  // the ones this consumer needs (group.id, offsets, callbacks) are its own.
  std::vector<std::pair<std::string, std::string>> properties;
  std::string topic;
  std::string group;
  // Records held per partition before it is paused (resumed at half).
  std::size_t max_buffered = 512;
  // Bytes (keys, values, headers) held in all the buffers: each assigned
  // partition pauses at its share (resumed at half), so that large
  // records do not multiply the memory a record count allows. A partition
  // takes one record whatever its size: its buffer is never empty for it.
  std::size_t max_buffered_bytes = 32u << 20;
  // How long the assign handler's read of committed offsets may take.
  int committed_timeout_ms = 10000;
};

class KafkaGroupConsumer {
 public:
  struct Handlers {
    // Before `partitions` are taken away (a rebalance, or close()): what
    // is written here is there before another member gets them.
    std::function<void(const std::vector<std::int32_t>& partitions)> on_revoke;
    // `partitions` are this consumer's now, each with what the group
    // committed; returns those that start paused (resume() them once
    // ready). The buffer of a partition that was taken away and is given
    // again starts empty.
    std::function<std::set<std::int32_t>(const std::map<std::int32_t, KafkaCommitted>& partitions)> on_assign;
    // A commit's answer: ok, or why it failed (the next one covers it).
    std::function<void(const Status& result)> on_committed;
    // Something went wrong that librdkafka goes on with by itself (a
    // broker down, a partition without a leader): for the worker's log.
    std::function<void(const std::string& what)> on_notice;
  };

  // Subscribes to the topic. What fails here (a property librdkafka does
  // not know, a value it refuses) is said with its name.
  static Expected<std::unique_ptr<KafkaGroupConsumer>> open(KafkaConsumerSettings settings, Handlers handlers);
  ~KafkaGroupConsumer();
  KafkaGroupConsumer(const KafkaGroupConsumer&) = delete;
  KafkaGroupConsumer& operator=(const KafkaGroupConsumer&) = delete;

  // Readable when pump() has something to take.
  int wait_fd() const { return wake_.get(); }
  // Takes what came (records into the buffers; rebalances, commit answers
  // and errors to the handlers). Never blocks but inside a rebalance.
  void pump();
  // The next buffered record of an assigned partition that is not held
  // back (`skip`: partitions the caller does not want from now), oldest
  // partition first; nullopt when none.
  std::optional<KafkaMessage> next(const std::set<std::int32_t>& skip = {});
  // Records buffered, of every partition.
  std::size_t buffered() const;
  // Records buffered of one partition.
  std::size_t buffered(std::int32_t partition) const;
  // Whether librdkafka fetches the partition now (false: paused, by the
  // caller or because its buffer is full).
  bool fetching(std::int32_t partition) const {
    return assigned_.count(partition) > 0 && paused_now_.count(partition) == 0;
  }

  void pause(std::int32_t partition);
  void resume(std::int32_t partition);
  const std::set<std::int32_t>& assignment() const { return assigned_; }
  // Commits, asynchronously (the answer comes to on_committed), or, with
  // `wait`, before it returns (a revoke, the end: the next owner starts
  // from it).
  Status commit(const std::map<std::int32_t, KafkaCommitted>& offsets, bool wait = false);
  // The partition's low and high watermarks as last seen by the fetcher
  // (no request; nullopt before the first fetch).
  std::optional<std::pair<std::int64_t, std::int64_t>> watermarks(std::int32_t partition) const;
  // What the group committed for `partition`, asked again (blocks up to
  // committed_timeout_ms): for one whose assign could not read it.
  Expected<KafkaCommitted> read_committed(std::int32_t partition);
  // A fatal error of the client ("" none): the worker must stop.
  std::string fatal_error() const;
  // Leaves the group (on_revoke runs for what is assigned); blocks until
  // the group heard it, at most librdkafka's own bound.
  void close();

 private:
  KafkaGroupConsumer(KafkaConsumerSettings settings, Handlers handlers) :
      settings_(std::move(settings)), handlers_(std::move(handlers)) {}
  friend struct KafkaConsumerCallbacks;
  void on_rebalance(bool assign, rd_kafka_topic_partition_list_s* partitions);
  // Pauses or resumes it as it should be: paused when the caller paused it
  // or its buffer is full; a full one stays paused until it is down to half.
  void sync_pause(std::int32_t partition);

  struct Buffer {
    std::deque<KafkaMessage> records;
    std::size_t bytes = 0;
  };

  KafkaConsumerSettings settings_;
  Handlers handlers_;
  rd_kafka_s* rk_ = nullptr;
  rd_kafka_queue_s* queue_ = nullptr;  // the consumer's
  UniqueFd wake_;
  std::set<std::int32_t> assigned_;
  std::set<std::int32_t> paused_by_caller_;
  std::set<std::int32_t> paused_now_;   // as librdkafka has it
  std::map<std::int32_t, Buffer> buffered_;
  bool closed_ = false;
};

}  // namespace pillbox::broker
