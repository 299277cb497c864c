// The Kafka fleet's pure parts (supervisor/broker/kafka_config.h): the
// --kafka bootstrap list and --topic's name. What a cluster answers is
// tested against librdkafka's mock cluster in tests/e2e/kafka_submit_test.cpp.
#include <doctest/doctest.h>

#include <string>

#include "supervisor/broker/kafka_config.h"

using pillbox::ErrorCode;
using pillbox::broker::check_kafka_topic_name;
using pillbox::broker::parse_kafka_bootstrap;

TEST_CASE("kafka bootstrap: HOST:PORT entries separated by commas, names, IPv4 and [IPv6]") {
  auto one = parse_kafka_bootstrap("127.0.0.1:9092");
  REQUIRE(one.has_value());
  CHECK(one->brokers == std::vector<std::string>{"127.0.0.1:9092"});
  auto three = parse_kafka_bootstrap("kafka-1.example:9092,10.0.0.2:19092,[::1]:9093");
  REQUIRE(three.has_value());
  CHECK(three->brokers.size() == 3);
  CHECK(three->brokers[2] == "[::1]:9093");
  CHECK(three->joined() == "kafka-1.example:9092,10.0.0.2:19092,[::1]:9093");
  CHECK(parse_kafka_bootstrap("h:1").has_value());
  CHECK(parse_kafka_bootstrap("h:65535").has_value());
}

TEST_CASE("kafka bootstrap: what is not a list of HOST:PORT is a usage error that says why") {
  struct Case {
    std::string text;
    std::string says;
  };
  const Case cases[] = {
      {"", "empty"},
      {"host", "'host' has no port (Kafka's is usually 9092)"},
      {"host:", "'host:' has a port that is not 1 to 65535"},
      {"host:0", "port that is not 1 to 65535"},
      {"host:65536", "port that is not 1 to 65535"},
      {"host:90x2", "port that is not 1 to 65535"},
      {"host:-1", "port that is not 1 to 65535"},
      {":9092", "':9092' has no host"},
      {"a:9092, b:9092", "no spaces"},
      {" a:9092", "no spaces"},
      {"a:9092\n", "no spaces"},
      {"a:9092,,b:9092", "an empty entry"},
      {"a:9092,", "an empty entry"},
      {",a:9092", "an empty entry"},
      {"::1:9092", "an IPv6 address goes in brackets"},
      {"[zz]:9092", "IPv6 address that is not one"},
      {"[]:9092", "has no host"},
      {"kafka://h:9092", "'kafka://h:9092' is a URL: give HOST:PORT, no scheme"},
      {"h\x01:9092", "a control character"},
      {"user@h:9092", "not a name or an address"},
  };
  for (const Case& c : cases) {
    INFO("'" << c.text << "'");
    auto parsed = parse_kafka_bootstrap(c.text);
    REQUIRE_FALSE(parsed.has_value());
    CHECK(parsed.error_code() == ErrorCode::kUsage);
    CHECK(parsed.error().find("--kafka HOST:PORT[,HOST:PORT...]: ") == 0);
    CHECK(parsed.error().find(c.says) != std::string::npos);
  }
  std::string many;
  for (int i = 0; i < 65; ++i) many += (i ? ",h" : "h") + std::to_string(i) + ":9092";
  auto too_many = parse_kafka_bootstrap(many);
  REQUIRE_FALSE(too_many.has_value());
  CHECK(too_many.error().find("more than 64 entries") != std::string::npos);
}

TEST_CASE("kafka topic names: Kafka's rule, as a usage error") {
  CHECK(check_kafka_topic_name("jobs").is_ok());
  CHECK(check_kafka_topic_name("team-a.jobs_v2").is_ok());
  CHECK(check_kafka_topic_name(std::string(249, 't')).is_ok());
  for (const std::string& bad : {std::string(), std::string("."), std::string(".."), std::string(250, 't'),
                                std::string("a b"), std::string("a/b"), std::string("jobs\n"), std::string("j\xc3\xa9")}) {
    INFO("'" << bad << "'");
    const auto s = check_kafka_topic_name(bad);
    CHECK_FALSE(s.is_ok());
    CHECK(s.code() == ErrorCode::kUsage);
  }
}
