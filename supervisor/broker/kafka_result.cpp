#include "supervisor/broker/kafka_result.h"

#include <utility>

#include "supervisor/broker/kafka_dead_letter.h"

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
  return out;
}

}  // namespace pillbox::broker
