#include "supervisor/broker/kafka_result.h"

#include <utility>

#include "supervisor/broker/kafka_dead_letter.h"
#include "supervisor/broker/kafka_record_fit.h"

namespace pillbox::broker {

std::optional<KafkaOutgoing> kafka_result(const WorkerSettings& settings, const HeldEntry& e,
                                          const KafkaMessage& original, const Outcome& outcome) {
  if (!settings.results) return std::nullopt;
  KafkaOutgoing out;
  out.topic = kafka_results_topic(original.topic);
  out.partition = original.partition;
  out.key = original.key;
  out.value = outcome.output.size() <= settings.results_max_output ? outcome.output : std::string();
  for (auto& [name, value] : result_fields(settings, e, outcome)) {
    if (name == "output" || name == "output_b64") continue;  // the value
    out.headers.emplace_back(std::move(name), std::move(value));
  }
  for (auto& h : kafka_source_headers(original)) out.headers.push_back(std::move(h));
  // A result Kafka would refuse cannot settle its record: every worker
  // that ran it would stop there, and its partition with it. An output
  // that does not fit with the key and the headers goes without it, as one
  // over --results-max-output does.
  if (auto omitted = omit_value_to_fit(out)) {
    out.headers.emplace_back("output_omitted", omitted->why);
    out.headers.emplace_back("output_size", std::to_string(omitted->size));
    out.headers.emplace_back("output_sha256", omitted->sha256);
  }
  return out;
}

}  // namespace pillbox::broker
