#include "tests/e2e/kafka_mock.h"

#include <doctest/doctest.h>
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstring>
#include <fstream>
#include <sstream>

#include "tests/e2e/redis_server.h"  // free_loopback_port

namespace e2e {

std::vector<KafkaTopicSpec> kafka_worker_topics(const std::string& topic, int partitions) {
  return {{topic, partitions},
          {topic + ".pillbox-attempts", partitions},
          {topic + ".dlq", partitions},
          {topic + ".results", partitions}};
}

std::string kafka_mock_program() { return std::string(PILLBOX_BUILD_DIR) + "/fixtures/pillbox-kafka-mock"; }

std::string closed_kafka_bootstrap() { return "127.0.0.1:" + std::to_string(free_loopback_port()); }

KafkaMock::KafkaMock(const std::vector<KafkaTopicSpec>& topics, int brokers) : brokers_(brokers) {
  const std::string program = kafka_mock_program();
  if (::access(program.c_str(), X_OK) != 0) {
    why_not_ = program + " is not built (the pillbox-kafka-mock target, with librdkafka-dev)";
    return;
  }
  std::vector<std::string> args = {program, "--brokers", std::to_string(brokers)};
  for (const auto& t : topics) args.insert(args.end(), {"--topic", t.name + ":" + std::to_string(t.partitions)});
  std::vector<char*> argv;
  for (auto& a : args) argv.push_back(a.data());
  argv.push_back(nullptr);
  const std::string err_path = dir_.file("err");
  int in[2], out[2];
  REQUIRE(::pipe2(in, O_CLOEXEC) == 0);
  REQUIRE(::pipe2(out, O_CLOEXEC) == 0);
  const pid_t parent = ::getpid();
  const pid_t pid = ::fork();
  REQUIRE(pid >= 0);
  if (pid == 0) {
    ::prctl(PR_SET_PDEATHSIG, SIGKILL);  // never outlives a test that died
    if (::getppid() != parent) ::_exit(127);
    const int err = ::open(err_path.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
    if (err < 0) ::_exit(127);
    ::dup2(in[0], 0);
    ::dup2(out[1], 1);
    ::dup2(err, 2);
    ::execv(argv[0], argv.data());
    ::_exit(127);
  }
  ::close(in[0]);
  ::close(out[1]);
  pid_ = pid;
  in_ = in[1];
  out_ = out[0];
  std::string line;
  if (!read_line(line, 30000) || line.rfind("bootstrap ", 0) != 0) {
    const std::string said = line;
    stop();
    FAIL(program << " did not get ready: its first line was '" << said << "'; stderr:\n" << err());
  }
  bootstrap_ = line.substr(10);
}

KafkaMock::~KafkaMock() { stop(); }

bool KafkaMock::read_line(std::string& line, int timeout_ms) {
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::milliseconds(timeout_ms);
  for (;;) {
    if (const auto nl = pending_.find('\n'); nl != std::string::npos) {
      line = pending_.substr(0, nl);
      pending_.erase(0, nl + 1);
      return true;
    }
    const auto left =
        std::chrono::duration_cast<std::chrono::milliseconds>(deadline - std::chrono::steady_clock::now()).count();
    if (left <= 0) return false;
    pollfd p{out_, POLLIN, 0};
    if (::poll(&p, 1, static_cast<int>(left)) < 0 && errno != EINTR) return false;
    if (p.revents == 0) continue;
    char buf[4096];
    const ssize_t n = ::read(out_, buf, sizeof buf);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return false;  // it ended
    pending_.append(buf, static_cast<std::size_t>(n));
  }
}

std::string KafkaMock::command(const std::string& line) {
  REQUIRE(available());
  const std::string sent = line + "\n";
  REQUIRE_MESSAGE(::write(in_, sent.data(), sent.size()) == static_cast<ssize_t>(sent.size()),
                  "pillbox-kafka-mock's stdin: " << std::strerror(errno));
  std::string answer;
  REQUIRE_MESSAGE(read_line(answer, 10000), "pillbox-kafka-mock did not answer '" << line << "'; stderr:\n" << err());
  return answer;
}

void KafkaMock::must(const std::string& line) {
  const std::string answer = command(line);
  REQUIRE_MESSAGE(answer == "ok", "pillbox-kafka-mock: '" << line << "': " << answer);
}

void KafkaMock::stop() {
  if (in_ >= 0) ::close(in_);  // stdin ends: it stops
  in_ = -1;
  if (pid_ > 0) {
    if (!still_running_after({pid_}, std::chrono::seconds(10)).empty()) {
      ::kill(pid_, SIGKILL);
      FAIL_CHECK("pillbox-kafka-mock still running 10 s after its stdin closed, killed");
    }
    while (::waitpid(pid_, nullptr, 0) < 0 && errno == EINTR) {
    }
    pid_ = 0;
  }
  if (out_ >= 0) ::close(out_);
  out_ = -1;
}

// No doctest assertion here: it is read inside REQUIRE_MESSAGE, where one
// would deadlock doctest's reporter.
std::string KafkaMock::err() const {
  std::ifstream in(dir_.file("err"), std::ios::binary);
  std::ostringstream os;
  os << in.rdbuf();
  return os.str();
}

}  // namespace e2e
