#include "supervisor/broker/amqp_topology.h"

#include <algorithm>
#include <cstdio>
#include <map>

namespace pillbox::broker {
namespace {

// Why pillbox declares each argument, for the sentence a mismatch becomes.
const std::map<std::string, std::string>& argument_reasons() {
  static const std::map<std::string, std::string> reasons = {
      {"x-queue-type=stream",
       "a stream queue, read by offset, so that reading it consumes nothing: the dead letters, operators' "
       "states, replays' notices"},
      {"x-queue-type=quorum",
       "a quorum queue, so that the broker counts every delivery (a worker killed mid-task included) and "
       "dead-letters a message that kills every worker"},
      {"x-delivery-limit", "the deliveries the broker allows before it dead-letters a message itself"},
      {"x-dead-letter-exchange", "where the broker sends dead letters: the exchange NAME.dlx, bound to NAME.dlq"},
      {"x-dead-letter-exchange=", "the default exchange, through which an expired retry goes back to the work queue"},
      {"x-dead-letter-strategy", "at-least-once, so that no dead letter is lost between the queues"},
      {"x-overflow", "reject-publish, which at-least-once dead-lettering needs"},
      {"durable", "a durable queue, so that a broker restart loses no task"},
      {"x-message-ttl", "a retry's wait: the delay queue's messages expire back into NAME after it"},
      {"x-dead-letter-routing-key", "where an expired retry goes back to: the work queue NAME"},
  };
  return reasons;
}

// "the value 'quorum' of type 'longstr'" -> "'quorum'"; "none" -> "not set".
std::string value_words(std::string text) {
  if (text == "none") return "not set";
  const std::string prefix = "the value ";
  if (text.rfind(prefix, 0) == 0) text = text.substr(prefix.size());
  const auto of_type = text.find(" of type ");
  if (of_type != std::string::npos) text = text.substr(0, of_type);
  return text;
}

// The text between `start` and `end` in `s` after `from`, or "".
std::string between(const std::string& s, const std::string& start, const std::string& end, std::size_t from = 0) {
  const auto a = s.find(start, from);
  if (a == std::string::npos) return "";
  const auto b = s.find(end, a + start.size());
  if (b == std::string::npos) return "";
  return s.substr(a + start.size(), b - a - start.size());
}

}  // namespace

AmqpQueueNames amqp_queue_names(const std::string& queue) { return {queue, queue + ".dlx", queue + ".dlq"}; }

bool supports_at_least_once(const std::string& server_version) {
  int major = 0;
  int minor = 0;
  if (std::sscanf(server_version.c_str(), "%d.%d", &major, &minor) != 2) return false;
  return major > 3 || (major == 3 && minor >= 10);
}

std::vector<AmqpField> stream_queue_arguments() { return {{"x-queue-type", std::string("stream")}}; }

std::vector<AmqpField> work_queue_arguments(const AmqpTopologySettings& settings, bool at_least_once) {
  std::vector<AmqpField> a = {
      {"x-queue-type", std::string("quorum")},
      {"x-delivery-limit", settings.delivery_limit},
      {"x-dead-letter-exchange", amqp_queue_names(settings.queue).dlx},
  };
  if (at_least_once) {
    a.push_back({"x-dead-letter-strategy", std::string("at-least-once")});
    a.push_back({"x-overflow", std::string("reject-publish")});
  }
  return a;
}

std::string explain_mismatch(const std::string& queue, const std::string& where, const AmqpRefusal& refusal,
                             const std::vector<AmqpField>& declared) {
  const std::string arg = between(refusal.text, "inequivalent arg '", "'");
  if (refusal.code != 406 || arg.empty()) return where + " refused queue '" + queue + "': " + refusal.text;
  const std::string received = value_words(between(refusal.text, "received ", " but current is "));
  const auto current_at = refusal.text.find(" but current is ");
  const std::string current = value_words(current_at == std::string::npos ? "" : refusal.text.substr(current_at + 16));
  std::string bare = received;  // 'quorum' -> quorum
  if (bare.size() >= 2 && bare.front() == '\'' && bare.back() == '\'') bare = bare.substr(1, bare.size() - 2);
  auto reason = argument_reasons().find(arg + "=" + bare);
  if (reason == argument_reasons().end()) reason = argument_reasons().find(arg);
  std::string s = "queue '" + queue + "' exists on " + where + " with " + arg + " " + current + ", but pillbox needs " +
                  received;
  if (reason != argument_reasons().end()) s += " (" + reason->second + ")";
  s += ". pillbox declares it durable with";
  for (std::size_t i = 0; i < declared.size(); ++i) {
    const AmqpField& a = declared[i];
    const std::string* text = a.value.text();
    const std::string value = text ? (text->empty() ? "''" : *text) : std::to_string(a.value.integer().value_or(0));
    s += (i == 0 ? " " : ", ") + a.name + " " + value;
  }
  s += " (RabbitMQ names the first difference it finds); it does not change a queue that may hold messages: move "
       "them, delete the queue and let pillbox declare it, or name another queue (a policy cannot stand in for an "
       "argument: RabbitMQ compares a declare with the queue's own arguments only)";
  return s;
}

Status check_queue_name(const std::string& queue) {
  if (queue.empty()) return Status::error("--queue NAME is empty", ErrorCode::kUsage);
  if (queue.find('\0') != std::string::npos) return Status::error("--queue NAME holds a NUL byte", ErrorCode::kUsage);
  if (queue.size() > kLongestQueueName) {
    return Status::error("--queue NAME is " + std::to_string(queue.size()) + " bytes long; at most " +
                             std::to_string(kLongestQueueName) +
                             ": pillbox names its queues after it (NAME.dlq.lock.ID, the longest, adds 28 bytes) and "
                             "RabbitMQ takes names of up to 255",
                         ErrorCode::kUsage);
  }
  return Status::ok();
}

std::chrono::milliseconds delay_bucket(std::chrono::milliseconds wanted) {
  std::int64_t ms = 1;
  while (ms < wanted.count() && ms < (std::int64_t{1} << 40)) ms <<= 1;
  return std::chrono::milliseconds(ms);
}

std::vector<std::chrono::milliseconds> delay_buckets(std::chrono::milliseconds longest) {
  std::vector<std::chrono::milliseconds> buckets;
  const std::chrono::milliseconds last = delay_bucket(longest);
  for (std::chrono::milliseconds b{1}; b <= last; b *= 2) buckets.push_back(b);
  return buckets;
}

std::string delay_queue_name(const std::string& queue, std::chrono::milliseconds bucket) {
  return queue + ".delay." + std::to_string(bucket.count());
}

std::vector<AmqpField> delay_queue_arguments(const std::string& queue, std::chrono::milliseconds bucket,
                                             bool at_least_once) {
  std::vector<AmqpField> a = {
      {"x-queue-type", std::string("quorum")},
      {"x-message-ttl", static_cast<std::int64_t>(bucket.count())},
      {"x-dead-letter-exchange", std::string("")},
      {"x-dead-letter-routing-key", queue},
  };
  if (at_least_once) {
    a.push_back({"x-dead-letter-strategy", std::string("at-least-once")});
    a.push_back({"x-overflow", std::string("reject-publish")});
  }
  return a;
}

Expected<std::string> declare_delay_queue(AmqpConnection& connection, const std::string& queue,
                                          std::chrono::milliseconds bucket) {
  const std::string name = delay_queue_name(queue, bucket);
  const auto arguments = delay_queue_arguments(queue, bucket, supports_at_least_once(connection.server_version()));
  if (auto q = connection.declare_queue(name, arguments); !q) {
    if (connection.refusal()) {
      return Error{explain_mismatch(name, "RabbitMQ at " + connection.address().describe(), *connection.refusal(),
                                    arguments)};
    }
    return Error{q.error(), q.error_code()};
  }
  return name;
}

std::int64_t worker_delivery_limit(std::uint32_t max_attempts) {
  return std::max<std::int64_t>(AmqpTopologySettings{}.delivery_limit, std::int64_t{max_attempts} + 1);
}

Expected<AmqpTopology> declare_topology(AmqpConnection& connection, const AmqpTopologySettings& settings) {
  AmqpTopology t;
  t.names = amqp_queue_names(settings.queue);
  t.server_version = connection.server_version();
  t.at_least_once = supports_at_least_once(t.server_version);
  const std::string where = "RabbitMQ at " + connection.address().describe();
  auto mismatch = [&](const std::string& queue, const std::vector<AmqpField>& declared,
                      const std::string& message) -> Error {
    if (connection.refusal()) return Error{explain_mismatch(queue, where, *connection.refusal(), declared)};
    return Error{message};
  };
  // The dead letters' side first: NAME names NAME.dlx, which must exist
  // before a message can be dead-lettered there.
  if (auto s = connection.declare_exchange(t.names.dlx, "fanout"); !s) return Error{s.message()};
  const std::vector<AmqpField> dlq_arguments = stream_queue_arguments();
  if (auto q = connection.declare_queue(t.names.dlq, dlq_arguments); !q) return mismatch(t.names.dlq, dlq_arguments, q.error());
  if (auto s = connection.bind_queue(t.names.dlq, t.names.dlx, ""); !s) return Error{s.message()};
  const std::vector<AmqpField> work_arguments = work_queue_arguments(settings, t.at_least_once);
  if (auto q = connection.declare_queue(t.names.work, work_arguments); !q) {
    return mismatch(t.names.work, work_arguments, q.error());
  }
  return t;
}

}  // namespace pillbox::broker
