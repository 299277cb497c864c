#pragma once
// A real redis-server for the end-to-end tests: started on a free loopback
// port in a directory of its own, ready when it says so on its log (no
// polling), stopped (SIGTERM, then waited for) at the end of the scope.
#include <sys/types.h>

#include <string>
#include <thread>

#include "tests/e2e/support.h"

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

}  // namespace e2e
