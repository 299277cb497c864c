#pragma once
// What every pillbox client of a Kafka cluster shares (submit's producer,
// the worker's consumer and producers): the --kafka bootstrap list, read and
// checked; the librdkafka settings they all take (client.id, no topic ever
// created by the client, bounded timeouts); librdkafka's events kept instead
// of printed; and how a cluster that cannot be reached is said. See
// docs/distributed.md, Kafka.
//
// librdkafka retries a broker it cannot reach forever, and logs each try on
// stderr by default: every call that waits on the cluster here has a bound,
// and its log goes to KafkaEvents, which says the last error in one line.
#include <librdkafka/rdkafkacpp.h>

#include <chrono>
#include <cstddef>
#include <memory>
#include <mutex>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "shared/status.h"

namespace pillbox::broker {

// --kafka HOST:PORT[,HOST:PORT...]: the brokers a client asks for the
// cluster's metadata first (any of them will do; the cluster names the rest).
struct KafkaBootstrap {
  std::vector<std::string> brokers;  // "HOST:PORT" each, "[V6]:PORT" for IPv6
  std::string joined() const;        // "HOST:PORT,HOST:PORT": librdkafka's bootstrap.servers, and what messages show
};

// Every entry HOST:PORT (a name, an IPv4 address or [IPv6]; a port 1 to
// 65535), separated by commas, no spaces, no empty entry, at most 64.
// Usage errors (ErrorCode::kUsage) say what is wrong and what is meant.
Expected<KafkaBootstrap> parse_kafka_bootstrap(std::string_view text);

// Kafka's rule for a topic name: 1 to 249 of [a-zA-Z0-9._-], not "." or
// "..". A usage error otherwise.
Status check_kafka_topic_name(std::string_view topic);

// How long a client waits for the cluster before it says it cannot reach
// it (the first metadata; librdkafka itself would try forever).
inline constexpr std::chrono::milliseconds kKafkaConnectTimeout{5000};
// What is left of `deadline` in whole milliseconds (0 when past), for a
// librdkafka call's timeout.
inline int kafka_remaining_ms(std::chrono::steady_clock::time_point deadline) {
  const auto left =
      std::chrono::duration_cast<std::chrono::milliseconds>(deadline - std::chrono::steady_clock::now()).count();
  return static_cast<int>(left < 0 ? 0 : left > 1'000'000'000 ? 1'000'000'000 : left);
}
// How long a produced record may wait for its broker's acknowledgement,
// retries included (librdkafka's message.timeout.ms; its default is 300 s).
inline constexpr std::chrono::milliseconds kKafkaDeliveryTimeout{30000};
// What a broker takes of one record: kafka_record_fit.h.

// librdkafka's events and log lines, kept rather than printed (pillbox says
// one line per error). Set on a client's conf by kafka_conf(); its methods
// are called from librdkafka's threads and the caller's.
class KafkaEvents : public RdKafka::EventCb {
 public:
  void event_cb(RdKafka::Event& event) override;
  // The last error librdkafka reported ("" when none): a refused
  // connection, a name that does not resolve, all brokers down.
  std::string last_error() const;
  // A fatal error (the idempotent producer's sequence lost): the client
  // is unusable from then on.
  bool fatal() const;

 private:
  mutable std::mutex mutex_;
  std::string last_error_;
  bool fatal_ = false;
};

// One librdkafka property set, or an error naming it (a property librdkafka
// refuses is our own mistake, never the user's).
Status kafka_set(RdKafka::Conf& conf, const std::string& name, const std::string& value);

// librdkafka's properties every pillbox client of the cluster has, as
// name and value: bootstrap.servers, client.id (`client_id`,
// "pillbox-submit"...), allow.auto.create.topics=false, and connection
// setup bounded by kKafkaConnectTimeout. For the clients on librdkafka's C
// API (the worker's: commit metadata is C only in 2.0.2); kafka_conf() is
// the same for the C++ API's.
using KafkaProperties = std::vector<std::pair<std::string, std::string>>;
KafkaProperties kafka_properties(const KafkaBootstrap& bootstrap, const std::string& client_id);

// A global conf with what every pillbox client of the cluster has:
// bootstrap.servers, client.id (`client_id`, "pillbox-submit"...), `events`
// as its event callback, allow.auto.create.topics=false, and connection
// setup bounded by kKafkaConnectTimeout. `events` must outlive the client.
Expected<std::unique_ptr<RdKafka::Conf>> kafka_conf(const KafkaBootstrap& bootstrap, const std::string& client_id,
                                                   KafkaEvents& events);

// "cannot reach Kafka at BOOTSTRAP within 5 s: WHY" (WHY: librdkafka's
// last error, else `error`'s text).
std::string kafka_unreachable(const KafkaBootstrap& bootstrap, const KafkaEvents& events, RdKafka::ErrorCode error);

// The command that makes `topic` by hand, for an error that says how.
std::string kafka_create_topic_command(const KafkaBootstrap& bootstrap, const std::string& topic, int partitions,
                                       int replication_factor);

}  // namespace pillbox::broker
