#include "tests/e2e/redis_server.h"

#include <arpa/inet.h>
#include <doctest/doctest.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <poll.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstring>
#include <cstdlib>
#include <random>
#include <vector>

namespace e2e {
namespace {

const char* const kRedisServer = "/usr/bin/redis-server";

}  // namespace

int free_loopback_port() {
  const int fd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  REQUIRE(fd >= 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  a.sin_port = 0;
  REQUIRE(::bind(fd, reinterpret_cast<sockaddr*>(&a), sizeof a) == 0);
  socklen_t len = sizeof a;
  REQUIRE(::getsockname(fd, reinterpret_cast<sockaddr*>(&a), &len) == 0);
  ::close(fd);
  return ntohs(a.sin_port);
}

const std::string& use_fleet_key() {
  static const TempDir dir(0700);
  static const std::string path = [] {
    const std::string file = dir.file("fleet.key");
    const int fd = ::open(file.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0600);
    REQUIRE(fd >= 0);
    std::string hex;
    std::random_device random;
    for (int i = 0; i < 64; ++i) hex += "0123456789abcdef"[random() % 16];
    hex += "\n";
    REQUIRE(::write(fd, hex.data(), hex.size()) == static_cast<ssize_t>(hex.size()));
    ::close(fd);
    REQUIRE(::setenv("PILLBOX_FLEET_KEY", file.c_str(), 1) == 0);
    return file;
  }();
  return path;
}

bool await_output(int fd, const std::string& marker, std::chrono::seconds limit, std::string& log,
                  std::thread& drain) {
  const auto deadline = std::chrono::steady_clock::now() + limit;
  bool found = false;
  while (!found) {
    const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - std::chrono::steady_clock::now());
    if (left.count() <= 0) break;
    pollfd p{fd, POLLIN, 0};
    if (::poll(&p, 1, static_cast<int>(left.count())) <= 0) break;
    char buf[4096];
    const ssize_t n = ::read(fd, buf, sizeof buf);
    if (n <= 0) break;
    log.append(buf, static_cast<std::size_t>(n));
    found = log.find(marker) != std::string::npos;
  }
  // Its later lines are read and dropped, so that it never blocks on a full pipe.
  if (drain.joinable()) drain.join();
  drain = std::thread([fd] {
    char buf[4096];
    while (::read(fd, buf, sizeof buf) > 0) {
    }
    ::close(fd);
  });
  return found;
}

RedisServer::RedisServer(RedisOptions options) : options_(options), dir_(0700) {
  use_fleet_key();
  if (::access(kRedisServer, X_OK) != 0) {
    why_not_ = std::string(kRedisServer) + " is not installed (tools/setup.sh installs redis-server)";
    return;
  }
  port_ = free_loopback_port();
  start();
}

void RedisServer::start() {
  REQUIRE(port_ > 0);
  REQUIRE(pid_ == 0);
  int out[2];
  REQUIRE(::pipe2(out, O_CLOEXEC) == 0);
  const std::string port = std::to_string(port_);
  std::vector<std::string> args = {kRedisServer, "--port", port, "--bind", "127.0.0.1", "--dir", dir_.path(),
                                   "--save", "", "--daemonize", "no", "--logfile", "", "--protected-mode", "no"};
  if (options_.durable) {
    // Every write is in the append-only file before its client gets the
    // answer, so a restart (even after SIGKILL) keeps all it acknowledged.
    args.insert(args.end(), {"--appendonly", "yes", "--appendfsync", "always"});
  } else {
    args.insert(args.end(), {"--appendonly", "no"});
  }
  if (options_.load_delay.count() > 0) args.insert(args.end(), {"--key-load-delay", std::to_string(options_.load_delay.count())});
  std::vector<char*> argv;
  for (auto& a : args) argv.push_back(a.data());
  argv.push_back(nullptr);
  pid_ = ::fork();
  REQUIRE(pid_ >= 0);
  if (pid_ == 0) {
    ::prctl(PR_SET_PDEATHSIG, SIGKILL);  // never outlives a test that died
    ::dup2(out[1], 1);
    ::dup2(out[1], 2);
    ::execv(kRedisServer, argv.data());
    _exit(127);
  }
  ::close(out[1]);
  // Ready when its log says so (at most 20 s), read without polling. A
  // durable server says so once it has loaded its data.
  std::string log;
  const bool ready = await_output(out[0], "Ready to accept connections", std::chrono::seconds(20), log, log_drain_);
  if (!ready) {
    stop(SIGKILL);
    FAIL("redis-server did not get ready on port " << port_ << ":\n" << log);
  }
}

void RedisServer::stop(int sig) {
  if (pid_ > 0) {
    ::kill(pid_, sig);
    while (::waitpid(pid_, nullptr, 0) < 0 && errno == EINTR) {
    }
    pid_ = 0;
  }
  // The log pipe ends with the server.
  if (log_drain_.joinable()) log_drain_.join();
}

RedisServer::~RedisServer() { stop(SIGTERM); }

pillbox::broker::RedisConnection connect(const RedisServer& server) {
  auto address = pillbox::broker::parse_redis_url(server.url());
  REQUIRE(address.has_value());
  auto redis = pillbox::broker::RedisConnection::open(*address);
  REQUIRE_MESSAGE(redis.has_value(), (redis ? "" : redis.error()));
  return std::move(*redis);
}

std::vector<std::string> add_entries(const RedisServer& server, const std::string& stream,
                                     const std::vector<std::pair<std::string, std::string>>& tasks) {
  auto redis = connect(server);
  std::vector<std::string> ids;
  for (const auto& [key, payload] : tasks) {
    auto r = redis.command({"XADD", stream, "*", "key", key, "payload", payload});
    REQUIRE_MESSAGE(r.has_value(), (r ? "" : r.error()));
    ids.push_back(pillbox::broker::reply_text(r->get()));
  }
  return ids;
}

std::vector<StreamEntry> stream_entries(const RedisServer& server, const std::string& stream) {
  auto redis = connect(server);
  auto reply = redis.command({"XRANGE", stream, "-", "+"});
  REQUIRE_MESSAGE(reply.has_value(), (reply ? "" : reply.error()));
  std::vector<StreamEntry> entries;
  const redisReply* r = reply->get();
  REQUIRE(r->type == REDIS_REPLY_ARRAY);
  for (std::size_t i = 0; i < r->elements; ++i) {
    const redisReply* entry = r->element[i];
    REQUIRE(entry->elements == 2);
    StreamEntry e;
    e.id = pillbox::broker::reply_text(entry->element[0]);
    const redisReply* fields = entry->element[1];
    for (std::size_t f = 0; f + 1 < fields->elements; f += 2) {
      e.fields[pillbox::broker::reply_text(fields->element[f])] = pillbox::broker::reply_text(fields->element[f + 1]);
    }
    entries.push_back(std::move(e));
  }
  return entries;
}

long long redis_integer(const RedisServer& server, const std::vector<std::string>& args) {
  auto redis = connect(server);
  std::vector<std::string_view> views(args.begin(), args.end());
  auto reply = redis.command(views);
  REQUIRE_MESSAGE(reply.has_value(), (reply ? "" : reply.error()));
  REQUIRE((*reply)->type == REDIS_REPLY_INTEGER);
  return (*reply)->integer;
}

std::pair<std::string, long long> pending_on(const RedisServer& server, const std::string& id,
                                             const std::string& stream, const std::string& group) {
  auto redis = connect(server);
  auto r = redis.command({"XPENDING", stream, group, id, id, "1"});
  if (!r || (*r)->type != REDIS_REPLY_ARRAY || (*r)->elements == 0) return {"", 0};
  const redisReply* e = (*r)->element[0];
  return {pillbox::broker::reply_text(e->element[1]), e->element[3]->integer};
}

long long pending_count(const RedisServer& server, const std::string& stream, const std::string& group) {
  auto redis = connect(server);
  auto reply = redis.command({"XPENDING", stream, group});
  if (!reply && reply.error().find("NOGROUP") != std::string::npos) return 0;
  REQUIRE_MESSAGE(reply.has_value(), (reply ? "" : reply.error()));
  REQUIRE((*reply)->type == REDIS_REPLY_ARRAY);
  REQUIRE((*reply)->elements >= 1);
  return (*reply)->element[0]->integer;
}

}  // namespace e2e
