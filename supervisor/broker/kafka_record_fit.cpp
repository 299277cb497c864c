#include "supervisor/broker/kafka_record_fit.h"

#include "shared/sha256.h"

namespace pillbox::broker {

std::size_t kafka_record_bytes(const KafkaOutgoing& record) {
  std::size_t bytes = (record.key ? record.key->size() : 0) + (record.value ? record.value->size() : 0) + kKafkaRecordFraming;
  for (const auto& [name, value] : record.headers) bytes += name.size() + (value ? value->size() : 0) + kKafkaRecordFraming;
  return bytes;
}

namespace {

// `field` of `record` (its value, its key) out, when the record is over
// the broker's limit, as `left`; what it was comes back.
std::optional<OmittedValue> omit_to_fit(KafkaOutgoing& record, std::optional<std::string>& field,
                                        std::optional<std::string> left, const std::string& with) {
  const std::size_t bytes = kafka_record_bytes(record);
  if (bytes <= kKafkaBrokerMessageMaxBytes || !field || field->empty()) return std::nullopt;
  OmittedValue omitted;
  omitted.record_bytes = bytes;
  omitted.size = field->size();
  omitted.sha256 = sha256_hex(*field);
  omitted.why = "too large for a Kafka record: " + std::to_string(bytes) + " bytes with its " + with + ", over the " +
                std::to_string(kKafkaBrokerMessageMaxBytes) + " a broker takes by default";
  field = std::move(left);
  return omitted;
}

}  // namespace

std::optional<OmittedValue> omit_value_to_fit(KafkaOutgoing& record) {
  return omit_to_fit(record, record.value, std::string(), "key and headers");
}

std::optional<OmittedValue> omit_key_to_fit(KafkaOutgoing& record) {
  return omit_to_fit(record, record.key, std::nullopt, "value and headers");
}

}  // namespace pillbox::broker
