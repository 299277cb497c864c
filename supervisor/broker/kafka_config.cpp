#include "supervisor/broker/kafka_config.h"

#include <charconv>

namespace pillbox::broker {
namespace {

constexpr std::size_t kMaxBrokers = 64;
constexpr std::string_view kBootstrapForm = "HOST:PORT[,HOST:PORT...]";

Error bad_bootstrap(const std::string& why) {
  return Error::usage("--kafka " + std::string(kBootstrapForm) + ": " + why);
}

bool host_char(char c) {
  return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '.' || c == '-' ||
         c == '_';
}

// One HOST:PORT entry; "" when it is one, else why not.
std::string entry_error(std::string_view entry) {
  const std::string quoted = "'" + std::string(entry) + "'";
  if (entry.find("://") != std::string_view::npos) return quoted + " is a URL: give HOST:PORT, no scheme";
  const auto colon = entry.rfind(':');
  if (colon == std::string_view::npos) return quoted + " has no port (Kafka's is usually 9092)";
  std::string_view host = entry.substr(0, colon);
  const std::string_view port = entry.substr(colon + 1);
  if (host.size() >= 2 && host.front() == '[' && host.back() == ']') {
    host = host.substr(1, host.size() - 2);
    for (char c : host) {
      const bool hex = (c >= '0' && c <= '9') || (c >= 'a' && c <= 'f') || (c >= 'A' && c <= 'F');
      if (!hex && c != ':' && c != '.') return quoted + " has an IPv6 address that is not one";
    }
    if (host.empty()) return quoted + " has no host";
  } else {
    if (host.empty()) return quoted + " has no host";
    if (host.find(':') != std::string_view::npos) return quoted + ": an IPv6 address goes in brackets ([::1]:9092)";
    for (char c : host) {
      if (!host_char(c)) return quoted + " has a host that is not a name or an address";
    }
  }
  int number = 0;
  const auto [end, ec] = std::from_chars(port.data(), port.data() + port.size(), number);
  if (port.empty() || ec != std::errc() || end != port.data() + port.size() || number < 1 || number > 65535) {
    return quoted + " has a port that is not 1 to 65535";
  }
  return "";
}

}  // namespace

std::string KafkaBootstrap::joined() const {
  std::string out;
  for (const std::string& b : brokers) out += (out.empty() ? "" : ",") + b;
  return out;
}

Expected<KafkaBootstrap> parse_kafka_bootstrap(std::string_view text) {
  if (text.empty()) return bad_bootstrap("empty");
  for (char c : text) {
    if (c == ' ' || c == '\t' || c == '\n' || c == '\r') return bad_bootstrap("no spaces (entries are separated by commas only)");
    if (static_cast<unsigned char>(c) < 0x20 || c == 0x7f) return bad_bootstrap("a control character");
  }
  KafkaBootstrap bootstrap;
  std::size_t start = 0;
  for (;;) {
    const auto comma = text.find(',', start);
    const std::string_view entry = text.substr(start, comma == std::string_view::npos ? std::string_view::npos : comma - start);
    if (entry.empty()) return bad_bootstrap("an empty entry (two commas, or one at an end)");
    if (auto why = entry_error(entry); !why.empty()) return bad_bootstrap(why);
    bootstrap.brokers.emplace_back(entry);
    if (bootstrap.brokers.size() > kMaxBrokers) return bad_bootstrap("more than " + std::to_string(kMaxBrokers) + " entries");
    if (comma == std::string_view::npos) break;
    start = comma + 1;
  }
  return bootstrap;
}

Status check_kafka_topic_name(std::string_view topic) {
  if (topic.empty()) return Status::error("--topic NAME: a topic needs a name", ErrorCode::kUsage);
  if (topic.size() > 249) {
    return Status::error("--topic NAME is " + std::to_string(topic.size()) + " bytes long; Kafka allows at most 249",
                         ErrorCode::kUsage);
  }
  if (topic == "." || topic == "..") return Status::error("--topic NAME cannot be . or ..", ErrorCode::kUsage);
  for (char c : topic) {
    if (!host_char(c)) {
      return Status::error("--topic NAME: Kafka allows only letters, digits, '.', '_' and '-' in a topic name",
                           ErrorCode::kUsage);
    }
  }
  return Status::ok();
}

void KafkaEvents::event_cb(RdKafka::Event& event) {
  std::lock_guard lock(mutex_);
  if (event.type() == RdKafka::Event::EVENT_ERROR) {
    // "Connect to ipv4#127.0.0.1:1 failed: Connection refused", "1/1
    // brokers are down", "Failed to resolve 'nowhere:9092'"...
    last_error_ = event.str().empty() ? RdKafka::err2str(event.err()) : event.str();
    if (event.fatal()) fatal_ = true;
  }
  // Log lines (EVENT_LOG) and statistics are dropped: the errors above say
  // what a user can act on, and librdkafka repeats a failing connection's
  // log at every retry.
}

std::string KafkaEvents::last_error() const {
  std::lock_guard lock(mutex_);
  return last_error_;
}

bool KafkaEvents::fatal() const {
  std::lock_guard lock(mutex_);
  return fatal_;
}

Status kafka_set(RdKafka::Conf& conf, const std::string& name, const std::string& value) {
  std::string why;
  if (conf.set(name, value, why) != RdKafka::Conf::CONF_OK) {
    return Status::error("librdkafka refused " + name + "=" + value + ": " + why);
  }
  return Status::ok();
}

KafkaProperties kafka_properties(const KafkaBootstrap& bootstrap, const std::string& client_id) {
  const std::string connect_ms = std::to_string(kKafkaConnectTimeout.count());
  return {
      {"bootstrap.servers", bootstrap.joined()},
      {"client.id", client_id},
      // A topic comes from an operator (or --create-topics), never
      // from a client that names one: a typo would make a topic.
      {"allow.auto.create.topics", "false"},
      // A broker that accepts the connection but never answers is
      // given up on like one that refuses it (librdkafka's own
      // default, 30 s, is longer than any call here waits).
      {"socket.connection.setup.timeout.ms", connect_ms},
      {"api.version.request.timeout.ms", connect_ms},
      // Quiet: the errors reach KafkaEvents; the log would say each
      // retry again on stderr.
      {"log.connection.close", "false"},
  };
}

Expected<std::unique_ptr<RdKafka::Conf>> kafka_conf(const KafkaBootstrap& bootstrap, const std::string& client_id,
                                                   KafkaEvents& events) {
  std::unique_ptr<RdKafka::Conf> conf(RdKafka::Conf::create(RdKafka::Conf::CONF_GLOBAL));
  std::string why;
  if (conf->set("event_cb", &events, why) != RdKafka::Conf::CONF_OK) {
    return Error{"librdkafka refused the event callback: " + why};
  }
  for (const auto& [name, value] : kafka_properties(bootstrap, client_id)) {
    if (auto s = kafka_set(*conf, name, value); !s) return Error{s.message()};
  }
  return conf;
}

std::string kafka_unreachable(const KafkaBootstrap& bootstrap, const KafkaEvents& events, RdKafka::ErrorCode error) {
  std::string why = events.last_error();
  if (why.empty()) why = RdKafka::err2str(error);
  return "cannot reach Kafka at " + bootstrap.joined() + " within " +
         std::to_string(kKafkaConnectTimeout.count() / 1000) + " s: " + why;
}

std::string kafka_create_topic_command(const KafkaBootstrap& bootstrap, const std::string& topic, int partitions,
                                       int replication_factor) {
  return "kafka-topics.sh --bootstrap-server " + bootstrap.joined() + " --create --topic " + topic +
         " --partitions " + std::to_string(partitions) +
         (replication_factor > 0 ? " --replication-factor " + std::to_string(replication_factor) : "");
}

}  // namespace pillbox::broker
