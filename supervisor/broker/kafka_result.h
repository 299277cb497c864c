#pragma once
// An ok's result on Kafka, to T.results (docs/distributed.md, Kafka): the
// Redis fleet's result fields (stream_entry.h result_fields) as RabbitMQ's
// result carries them (amqp_entry.h result_publication), in Kafka's
// record. Pure: no librdkafka, no I/O here.
//
//   key      the original's, exact (null stays null): a reader finds a
//            task's result by the key it was produced with
//   value    the task's output, exact; over --results-max-output, or too
//            large for a record with the key and headers (over
//            kKafkaBrokerMessageMaxBytes, the worker producer's limit
//            too), empty (not null: on a compacted T.results a null value
//            is a tombstone that deletes the key's result) and the headers
//            say its size and SHA-256 (output_omitted, output_size,
//            output_sha256)
//   headers  the result fields but the output, as text, then
//            pillbox.dedupe ("T/p@o": a worker killed after producing a
//            result and before its settle entry produces it again; a
//            reader keeps one per dedupe key) and pillbox.source.topic,
//            .partition, .offset (kafka_source_headers, as on a dead letter)
// It goes to the original's partition number of T.results (co-partitioned,
// as T.dlq is): a result and its copies are in one partition, in order,
// whatever the key. T.results is not signed, as NAME:results is not.
#include <optional>

#include "supervisor/broker/kafka_message.h"
#include "supervisor/broker/stream_entry.h"
#include "supervisor/broker/worker_settings.h"
#include "supervisor/classify/outcome.h"

namespace pillbox::broker {

// T.results: where the results of topic T go.
inline std::string kafka_results_topic(const std::string& topic) { return topic + ".results"; }

// The result of `e` (read from `original` in T) that ran ok; nullopt when
// the worker keeps none (settings.results false).
std::optional<KafkaOutgoing> kafka_result(const WorkerSettings& settings, const HeldEntry& e,
                                          const KafkaMessage& original, const Outcome& outcome);

}  // namespace pillbox::broker
