#pragma once
// The quarantine verbs on the fleet's quarantine of a mock cluster's topic,
// as the Kafka tests run them (with the fleet key's file `key`).
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "tests/e2e/kafka_mock.h"
#include "tests/e2e/support.h"

namespace e2e {

// ARGS... --kafka BOOTSTRAP --topic TOPIC --fleet-key KEY
inline std::vector<std::string> with_kafka(std::vector<std::string> args, const KafkaMock& mock,
                                           const std::string& topic, const std::string& key) {
  args.insert(args.end(), {"--kafka", mock.bootstrap(), "--topic", topic, "--fleet-key", key});
  return args;
}

// pillbox quarantine VERB... on `topic`'s quarantine
inline std::vector<std::string> kafka_quarantine(const KafkaMock& mock, const std::string& topic,
                                                 const std::vector<std::string>& verb, const std::string& key) {
  std::vector<std::string> args = {"quarantine"};
  args.insert(args.end(), verb.begin(), verb.end());
  return with_kafka(std::move(args), mock, topic, key);
}

// Record `id` as `show --json` prints it; null when it does not.
inline nlohmann::json kafka_shown(const KafkaMock& mock, const std::string& topic, const std::string& id,
                                  const std::string& key) {
  const auto s = run_pillbox(kafka_quarantine(mock, topic, {"show", id, "--json"}, key));
  return s.exit_code == 0 && s.records.size() == 1 ? nlohmann::json(s.records[0]) : nlohmann::json();
}

}  // namespace e2e
