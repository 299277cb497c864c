#pragma once
// A real redis-server for the end-to-end tests: started on a free loopback
// port in a directory of its own, ready when it says so on its log (no
// polling), stopped (SIGTERM, then waited for) at the end of the scope.
#include <sys/types.h>

#include <map>
#include <string>
#include <thread>
#include <vector>

#include "supervisor/broker/redis_connection.h"

#include "tests/e2e/support.h"

// Ends the test case with "skipped: why" when redis-server is not installed.
#define REQUIRE_REDIS(server)                       \
  if (!(server).available()) {                      \
    MESSAGE("skipped: " << (server).why_not());     \
    return;                                         \
  }

namespace e2e {

class RedisServer {
 public:
  // Fails the test when redis-server is installed but does not start; when
  // it is not installed, available() is false and says why.
  RedisServer();
  ~RedisServer();
  RedisServer(const RedisServer&) = delete;
  RedisServer& operator=(const RedisServer&) = delete;

  bool available() const { return pid_ > 0; }
  const std::string& why_not() const { return why_not_; }
  int port() const { return port_; }
  std::string url() const { return "redis://127.0.0.1:" + std::to_string(port_); }

 private:
  TempDir dir_;
  pid_t pid_ = 0;
  int port_ = 0;
  std::thread log_drain_;
  std::string why_not_;
};

// A loopback TCP port nothing listens on right now.
int free_loopback_port();

// A connection to the test's server; fails the test when it cannot connect.
pillbox::broker::RedisConnection connect(const RedisServer& server);

struct StreamEntry {
  std::string id;
  std::map<std::string, std::string> fields;
};
// Adds entries with the given keys and payloads (the fields `pillbox submit`
// writes), in order; returns their ids.
std::vector<std::string> add_entries(const RedisServer& server, const std::string& stream,
                                     const std::vector<std::pair<std::string, std::string>>& tasks);
// The stream's entries, oldest first (none when the key does not exist).
std::vector<StreamEntry> stream_entries(const RedisServer& server, const std::string& stream);
// One command whose reply is an integer (XLEN, HLEN, ...); fails the test otherwise.
long long redis_integer(const RedisServer& server, const std::vector<std::string>& args);
// XPENDING's summary: how many entries of `group` are pending (0 when the group is missing).
long long pending_count(const RedisServer& server, const std::string& stream, const std::string& group);

}  // namespace e2e
