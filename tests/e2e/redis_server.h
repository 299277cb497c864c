#pragma once
// A real redis-server for the end-to-end tests: started on a free loopback
// port in a directory of its own, ready when it says so on its log (no
// polling), stopped (SIGTERM, then waited for) at the end of the scope.
// With RedisOptions::durable it keeps an append-only file fsynced on every
// write, and can be stopped and started again on the same port and
// directory: a Redis restart that loses nothing it acknowledged.
#include <signal.h>
#include <sys/types.h>

#include <chrono>
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

// The fleet's key of this test process (a 0600 file of 64 hex digits, made
// once), put in PILLBOX_FLEET_KEY as an operator's environment would have
// it: every worker and operator verb the fleet tests start signs and checks
// dead letters with it. A test of unsigned dead letters gives its commands
// PILLBOX_FLEET_KEY="" (none) or another key. RedisServer calls it.
const std::string& use_fleet_key();

struct RedisOptions {
  // appendonly yes, appendfsync always: every write a client saw answered
  // is on disk, and survives stop() + start().
  bool durable = false;
  // Redis's key-load-delay (a setting of its own tests): each command of the
  // append-only file replayed at start waits this long, so that a restart
  // with data stays a while in its loading phase, answering LOADING.
  std::chrono::microseconds load_delay{0};
};

class RedisServer {
 public:
  // Fails the test when redis-server is installed but does not start; when
  // it is not installed, available() is false and says why.
  RedisServer() : RedisServer(RedisOptions{}) {}
  explicit RedisServer(RedisOptions options);
  ~RedisServer();
  RedisServer(const RedisServer&) = delete;
  RedisServer& operator=(const RedisServer&) = delete;

  bool available() const { return port_ > 0; }  // installed (it may be stopped now)
  const std::string& why_not() const { return why_not_; }
  int port() const { return port_; }
  std::string url() const { return "redis://127.0.0.1:" + std::to_string(port_); }

  // Ends the server with `sig` (SIGTERM: a clean shutdown; SIGKILL: a crash)
  // and waits for it to exit.
  void stop(int sig = SIGTERM);
  // Starts it again on the same port, in the same directory (a durable
  // server reloads its data); fails the test when it does not get ready.
  void start();
  bool running() const { return pid_ > 0; }
  pid_t pid() const { return pid_; }

 private:
  RedisOptions options_;
  TempDir dir_;
  pid_t pid_ = 0;
  int port_ = 0;
  std::thread log_drain_;
  std::string why_not_;
};

// A loopback TCP port nothing listens on right now.
int free_loopback_port();

// A server's output on `fd`, read (poll, no sleeps) until `marker` appears
// (true), `limit` passes or the output ends (false); `log` gets what was
// read. The rest is then read and dropped on `drain` (joined first if it
// ran before), so that the server never blocks on a full pipe; `fd` is
// closed when the output ends.
bool await_output(int fd, const std::string& marker, std::chrono::seconds limit, std::string& log, std::thread& drain);

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
// XPENDING's extended form for one entry: {consumer, delivery count}, or
// {"", 0} when it is not pending.
std::pair<std::string, long long> pending_on(const RedisServer& server, const std::string& id,
                                             const std::string& stream = "jobs", const std::string& group = "pillbox");
// XPENDING's summary: how many entries of `group` are pending (0 when the group is missing).
long long pending_count(const RedisServer& server, const std::string& stream, const std::string& group);

}  // namespace e2e
