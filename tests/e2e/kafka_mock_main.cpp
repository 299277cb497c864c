// pillbox-kafka-mock: librdkafka's mock cluster (rdkafka_mock.h) as a
// program, for the Kafka tests: N brokers on loopback that pillbox's clients
// reach like a real cluster. Driven by tests/e2e/kafka_mock.h.
//
//   pillbox-kafka-mock [--brokers N] [--topic NAME:PARTITIONS]...
//
// Prints one line, `bootstrap HOST:PORT,HOST:PORT,...`, once the brokers
// listen and the topics exist, then serves until stdin ends or SIGTERM or
// SIGINT comes. Meanwhile it reads commands on stdin, one a line, and answers
// each with one line, "ok" or "error: WHY" (commands_help below lists them):
// the test's hand on the cluster (topics, brokers down and up, coordinators,
// injected errors) for chaos.
//
// The mock is C only (librdkafka has no C++ binding of it). It runs in
// librdkafka's threads; the main thread only reads commands and signals.
#include <librdkafka/rdkafka.h>
#include <librdkafka/rdkafka_mock.h>
#include <poll.h>
#include <signal.h>
#include <pthread.h>
#include <sys/signalfd.h>
#include <syslog.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <charconv>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <map>
#include <optional>
#include <sstream>
#include <string>
#include <string_view>
#include <vector>

namespace {

constexpr const char* kUsage =
    "usage: pillbox-kafka-mock [--brokers N] [--topic NAME:PARTITIONS]...\n"
    "librdkafka's mock cluster on loopback, for tests: prints `bootstrap LIST` once ready, then\n"
    "answers commands on stdin (one line each: ok or error: WHY) until stdin ends or SIGTERM.\n";

constexpr const char* kCommands =
    "topic NAME PARTITIONS [REPLICATION], broker-down ID, broker-up ID, broker-rtt ID MS, "
    "leader TOPIC PARTITION BROKER, coordinator group|transaction KEY BROKER, "
    "request-errors API ERROR[,ERROR...], clear-request-errors API, topic-error TOPIC ERROR, "
    "api-version API MIN MAX (-1 -1: the API is gone)";

std::optional<int> parse_int(std::string_view text) {
  int value = 0;
  const char* end = text.data() + text.size();
  auto [p, ec] = std::from_chars(text.data(), end, value);
  if (ec != std::errc() || p != end) return std::nullopt;
  return value;
}

// Kafka's request types by name (the mock's error stacks are per API).
std::optional<int16_t> parse_api(std::string_view text) {
  static const std::map<std::string_view, int16_t> kApis = {
      {"Produce", 0},         {"Fetch", 1},           {"ListOffsets", 2},        {"Metadata", 3},
      {"OffsetCommit", 8},    {"OffsetFetch", 9},     {"FindCoordinator", 10},   {"JoinGroup", 11},
      {"Heartbeat", 12},      {"LeaveGroup", 13},     {"SyncGroup", 14},         {"DescribeGroups", 15},
      {"ListGroups", 16},     {"ApiVersions", 18},    {"CreateTopics", 19},      {"InitProducerId", 22},
      {"AddPartitionsToTxn", 24}, {"AddOffsetsToTxn", 25}, {"EndTxn", 26},       {"TxnOffsetCommit", 28}};
  if (auto it = kApis.find(text); it != kApis.end()) return it->second;
  if (auto n = parse_int(text); n && *n >= 0 && *n < 1000) return static_cast<int16_t>(*n);
  return std::nullopt;
}

// An error by librdkafka's name for it (NOT_LEADER_FOR_PARTITION,
// _TRANSPORT: the connection is closed) or by number.
std::optional<rd_kafka_resp_err_t> parse_error(std::string_view text) {
  if (auto n = parse_int(text)) return static_cast<rd_kafka_resp_err_t>(*n);
  const rd_kafka_err_desc* descs = nullptr;
  size_t count = 0;
  rd_kafka_get_err_descs(&descs, &count);
  for (size_t i = 0; i < count; ++i) {
    if (descs[i].name != nullptr && text == descs[i].name) return descs[i].code;
  }
  return std::nullopt;
}

std::vector<std::string> split(const std::string& text, char by) {
  std::vector<std::string> parts;
  std::string part;
  std::istringstream in(text);
  while (std::getline(in, part, by)) parts.push_back(part);
  return parts;
}

std::string answer(rd_kafka_resp_err_t err) {
  return err == RD_KAFKA_RESP_ERR_NO_ERROR ? "ok" : std::string("error: ") + rd_kafka_err2str(err);
}

class MockCluster {
 public:
  MockCluster(rd_kafka_mock_cluster_t* cluster, int brokers) : cluster_(cluster), brokers_(brokers) {}

  std::string create_topic(const std::string& name, int partitions, int replication) {
    if (name.empty()) return "error: a topic needs a name";
    if (partitions < 1) return "error: a topic needs at least one partition";
    if (replication < 1 || replication > brokers_) {
      return "error: replication must be 1 to " + std::to_string(brokers_) + " (the brokers)";
    }
    return answer(rd_kafka_mock_topic_create(cluster_, name.c_str(), partitions, replication));
  }

  // One command line; its one-line answer.
  std::string run(const std::string& line) {
    std::istringstream in(line);
    std::vector<std::string> w;
    for (std::string word; in >> word;) w.push_back(word);
    if (w.empty()) return "error: an empty command (" + std::string(kCommands) + ")";
    const std::string& verb = w[0];
    auto num = [&](std::size_t i) { return i < w.size() ? parse_int(w[i]) : std::nullopt; };
    auto broker = [&](std::size_t i) -> std::optional<int> {
      auto id = num(i);
      if (!id || *id < 1 || *id > brokers_) return std::nullopt;
      return id;
    };
    const std::string bad_broker = "error: a broker is 1 to " + std::to_string(brokers_);
    if (verb == "topic" && (w.size() == 3 || w.size() == 4)) {
      auto partitions = num(2);
      if (!partitions) return "error: PARTITIONS is a number";
      auto replication = w.size() == 4 ? num(3) : std::optional<int>(std::min(3, brokers_));
      if (!replication) return "error: REPLICATION is a number";
      return create_topic(w[1], *partitions, *replication);
    }
    if ((verb == "broker-down" || verb == "broker-up") && w.size() == 2) {
      auto id = broker(1);
      if (!id) return bad_broker;
      return answer(verb == "broker-down" ? rd_kafka_mock_broker_set_down(cluster_, *id)
                                          : rd_kafka_mock_broker_set_up(cluster_, *id));
    }
    if (verb == "broker-rtt" && w.size() == 3) {
      auto id = broker(1);
      auto ms = num(2);
      if (!id) return bad_broker;
      if (!ms || *ms < 0) return "error: MS is a number of milliseconds";
      return answer(rd_kafka_mock_broker_set_rtt(cluster_, *id, *ms));
    }
    if (verb == "leader" && w.size() == 4) {
      auto partition = num(2);
      auto id = num(3);
      if (!partition || *partition < 0) return "error: PARTITION is a number";
      if (!id || (*id != -1 && (*id < 1 || *id > brokers_))) return bad_broker + " (or -1: no leader)";
      return answer(rd_kafka_mock_partition_set_leader(cluster_, w[1].c_str(), *partition, *id));
    }
    if (verb == "coordinator" && w.size() == 4 && (w[1] == "group" || w[1] == "transaction")) {
      auto id = broker(3);
      if (!id) return bad_broker;
      return answer(rd_kafka_mock_coordinator_set(cluster_, w[1].c_str(), w[2].c_str(), *id));
    }
    if (verb == "request-errors" && w.size() == 3) {
      auto api = parse_api(w[1]);
      if (!api) return "error: unknown API " + w[1];
      std::vector<rd_kafka_resp_err_t> errors;
      for (const std::string& name : split(w[2], ',')) {
        auto err = parse_error(name);
        if (!err) return "error: unknown error " + name + " (librdkafka's names, e.g. NOT_LEADER_FOR_PARTITION)";
        errors.push_back(*err);
      }
      rd_kafka_mock_push_request_errors_array(cluster_, *api, errors.size(), errors.data());
      return "ok";
    }
    if (verb == "clear-request-errors" && w.size() == 2) {
      auto api = parse_api(w[1]);
      if (!api) return "error: unknown API " + w[1];
      rd_kafka_mock_clear_request_errors(cluster_, *api);
      return "ok";
    }
    if (verb == "topic-error" && w.size() == 3) {
      auto err = parse_error(w[2]);
      if (!err) return "error: unknown error " + w[2];
      rd_kafka_mock_topic_set_error(cluster_, w[1].c_str(), *err);
      return "ok";
    }
    if (verb == "api-version" && w.size() == 4) {
      auto api = parse_api(w[1]);
      auto min = num(2), max = num(3);
      if (!api) return "error: unknown API " + w[1];
      if (!min || !max) return "error: MIN and MAX are numbers";
      return answer(rd_kafka_mock_set_apiversion(cluster_, *api, static_cast<int16_t>(*min),
                                                 static_cast<int16_t>(*max)));
    }
    return "error: unknown command or wrong arguments: " + line + " (" + kCommands + ")";
  }

 private:
  rd_kafka_mock_cluster_t* cluster_;
  int brokers_;
};

int usage_error(const std::string& message) {
  std::fprintf(stderr, "pillbox-kafka-mock: %s\n%s", message.c_str(), kUsage);
  return 2;
}

// librdkafka's log lines, on stderr only when asked (the tests read stdout).
void quiet_log(const rd_kafka_t*, int level, const char* facility, const char* message) {
  if (level <= LOG_ERR || std::getenv("PILLBOX_KAFKA_MOCK_LOG") != nullptr) {
    std::fprintf(stderr, "pillbox-kafka-mock: %s: %s\n", facility, message);
  }
}

}  // namespace

int main(int argc, char** argv) {
  int brokers = 3;
  std::vector<std::pair<std::string, int>> topics;
  for (int i = 1; i < argc; ++i) {
    const std::string arg = argv[i];
    if (arg == "--help") {
      std::fputs(kUsage, stdout);
      return 0;
    }
    if (i + 1 >= argc) return usage_error(arg + " needs a value, or is unknown");
    const std::string value = argv[++i];
    if (arg == "--brokers") {
      auto n = parse_int(value);
      if (!n || *n < 1 || *n > 64) return usage_error("--brokers N: 1 to 64");
      brokers = *n;
    } else if (arg == "--topic") {
      const auto colon = value.rfind(':');
      auto partitions = colon == std::string::npos ? std::nullopt : parse_int(value.substr(colon + 1));
      if (!partitions || *partitions < 1 || colon == 0) return usage_error("--topic NAME:PARTITIONS, not " + value);
      topics.emplace_back(value.substr(0, colon), *partitions);
    } else {
      return usage_error("unknown option " + arg);
    }
  }

  // SIGTERM and SIGINT are read from a signalfd: blocked first, so that
  // librdkafka's threads (started below) inherit the mask and none of them
  // takes the signal.
  sigset_t stop_signals;
  sigemptyset(&stop_signals);
  sigaddset(&stop_signals, SIGTERM);
  sigaddset(&stop_signals, SIGINT);
  sigaddset(&stop_signals, SIGPIPE);  // a test that went away: its stdout pipe's write fails instead
  pthread_sigmask(SIG_BLOCK, &stop_signals, nullptr);
  sigdelset(&stop_signals, SIGPIPE);
  const int signals = signalfd(-1, &stop_signals, SFD_CLOEXEC);
  if (signals < 0) {
    std::fprintf(stderr, "pillbox-kafka-mock: signalfd: %s\n", std::strerror(errno));
    return 1;
  }

  // The mock needs a client instance to live in; it serves other clients
  // (pillbox's) over its loopback listeners, not through this one.
  char errstr[512];
  rd_kafka_conf_t* conf = rd_kafka_conf_new();
  rd_kafka_conf_set_log_cb(conf, quiet_log);
  rd_kafka_t* rk = rd_kafka_new(RD_KAFKA_PRODUCER, conf, errstr, sizeof errstr);
  if (rk == nullptr) {
    std::fprintf(stderr, "pillbox-kafka-mock: rd_kafka_new: %s\n", errstr);
    return 1;
  }
  rd_kafka_mock_cluster_t* cluster = rd_kafka_mock_cluster_new(rk, brokers);
  if (cluster == nullptr) {
    std::fprintf(stderr, "pillbox-kafka-mock: the mock cluster did not start (librdkafka said why above)\n");
    rd_kafka_destroy(rk);
    return 1;
  }
  MockCluster mock(cluster, brokers);
  int status = 0;
  for (const auto& [name, partitions] : topics) {
    const std::string said = mock.create_topic(name, partitions, std::min(3, brokers));
    if (said != "ok") {
      std::fprintf(stderr, "pillbox-kafka-mock: topic %s: %s\n", name.c_str(), said.c_str());
      status = 1;
    }
  }
  if (status == 0) {
    std::printf("bootstrap %s\n", rd_kafka_mock_cluster_bootstraps(cluster));
    std::fflush(stdout);
  }

  std::string pending;
  while (status == 0) {
    pollfd fds[2] = {{STDIN_FILENO, POLLIN, 0}, {signals, POLLIN, 0}};
    if (poll(fds, 2, -1) < 0) {
      if (errno == EINTR) continue;
      status = 1;
      break;
    }
    if (fds[1].revents != 0) break;  // SIGTERM or SIGINT: a clean stop
    if (fds[0].revents == 0) continue;
    char buf[4096];
    const ssize_t n = read(STDIN_FILENO, buf, sizeof buf);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) break;  // stdin ended: whoever drove us is gone
    pending.append(buf, static_cast<std::size_t>(n));
    for (std::size_t end; (end = pending.find('\n')) != std::string::npos;) {
      std::string line = pending.substr(0, end);
      pending.erase(0, end + 1);
      if (!line.empty() && line.back() == '\r') line.pop_back();
      std::printf("%s\n", mock.run(line).c_str());
      if (std::fflush(stdout) != 0) status = 1;  // nobody reads the answers any more
    }
  }
  rd_kafka_mock_cluster_destroy(cluster);
  rd_kafka_destroy(rk);
  return status;
}
