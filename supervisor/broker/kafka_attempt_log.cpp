#include "supervisor/broker/kafka_attempt_log.h"

#include <librdkafka/rdkafkacpp.h>

#include <algorithm>
#include <cstdint>
#include <map>
#include <utility>

namespace pillbox::broker {

AttemptLogReader::AttemptLogReader(AttemptLogSettings settings, std::unique_ptr<KafkaPartitionReader> reader)
    : settings_(std::move(settings)), reader_(std::move(reader)) {}

AttemptLogReader::~AttemptLogReader() = default;

Expected<std::unique_ptr<AttemptLogReader>> AttemptLogReader::open(const AttemptLogSettings& settings) {
  KafkaProperties properties = settings.properties;
  properties.insert(properties.end(), {{"bootstrap.servers", settings.brokers},
                                       {"client.id", "pillbox-attempt-log"},
                                       // librdkafka's log lines stay off stderr (the calls here say their errors).
                                       {"log_level", "0"}});
  auto reader = KafkaPartitionReader::open(properties, KafkaBootstrap{{settings.brokers}}, settings.timeout);
  if (!reader) return Error{reader.error()};
  return std::unique_ptr<AttemptLogReader>(new AttemptLogReader(settings, std::move(*reader)));
}

Expected<AttemptLogRead> AttemptLogReader::read(std::int32_t partition, std::optional<std::int64_t> from) {
  const std::string topic = attempt_log_topic(settings_.topic);
  const std::string where = "partition " + std::to_string(partition) + " of the attempt log " + topic;
  auto marks = reader_->watermarks(topic, partition);
  if (!marks) {
    return Error{marks.error() + " (the attempt log needs a partition for each of " + settings_.topic +
                 "'s: pillbox worker says how to create it)"};
  }
  AttemptLogRead r;
  r.end = marks->high;
  // T's own end: an entry about a record past it is no worker's (kafka_attempts.h).
  if (auto source = reader_->watermarks(settings_.topic, partition)) r.source_end = source->high;
  r.from = from.value_or(marks->low);
  if (from && (*from < marks->low || *from > marks->high)) {
    r.note = where + " holds offsets " + std::to_string(marks->low) + ".." + std::to_string(marks->high) + ", not " +
             std::to_string(*from) + " (" +
             (*from < marks->low ? "retention removed entries the commit needs: histories may be short"
                                 : "the commit's metadata is not this log's") +
             "): read from its beginning";
    r.from = marks->low;
  }
  // Values cut past the bound: unreadable all the same, and a hostile one
  // does not fill the worker's memory.
  auto s = reader_->read(
      topic, partition, r.from, r.end,
      [&](KafkaMessage&& e) {
        e.headers.clear();
        r.entries.push_back(std::move(e));
        return true;
      },
      kMaxAttemptEntryBytes + 1);
  if (!s) return Error{s.message() + ": the partition's records are not run before their attempts are read"};
  return r;
}

}  // namespace pillbox::broker
