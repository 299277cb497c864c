#include "supervisor/broker/kafka_record_fit.h"

#include "shared/sha256.h"

namespace pillbox::broker {

std::size_t kafka_record_bytes(const KafkaOutgoing& record) {
  std::size_t bytes = (record.key ? record.key->size() : 0) + (record.value ? record.value->size() : 0) + kKafkaRecordFraming;
  for (const auto& [name, value] : record.headers) bytes += name.size() + (value ? value->size() : 0) + kKafkaRecordFraming;
  return bytes;
}

std::optional<OmittedValue> omit_value_to_fit(KafkaOutgoing& record) {
  const std::size_t bytes = kafka_record_bytes(record);
  if (bytes <= kKafkaBrokerMessageMaxBytes || !record.value || record.value->empty()) return std::nullopt;
  OmittedValue omitted;
  omitted.record_bytes = bytes;
  omitted.size = record.value->size();
  omitted.sha256 = sha256_hex(*record.value);
  omitted.why = "too large for a Kafka record: " + std::to_string(bytes) + " bytes with its key and headers, over the " +
                std::to_string(kKafkaBrokerMessageMaxBytes) + " a broker takes by default";
  record.value = std::string();
  return omitted;
}

}  // namespace pillbox::broker
