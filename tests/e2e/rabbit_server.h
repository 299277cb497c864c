#pragma once
// A real RabbitMQ broker for the end-to-end tests: a node of its own (name,
// AMQP, distribution and epmd ports, directory), ready when it says so on
// its stdout (no polling), stopped (SIGTERM, then waited for, with every
// process it started) at the end of the scope. It keeps its Mnesia
// directory across stop() + start(): durable queues survive a restart.
#include <signal.h>
#include <sys/types.h>

#include <string>
#include <thread>
#include <vector>

#include "tests/e2e/redis_server.h"  // free_loopback_port
#include "tests/e2e/support.h"

// Ends the test case with "skipped: why" when the broker cannot run here.
#define REQUIRE_RABBITMQ(server)                    \
  if (!(server).available()) {                      \
    MESSAGE("skipped: " << (server).why_not());     \
    return;                                         \
  }

namespace e2e {

class RabbitServer {
 public:
  // Fails the test when rabbitmq-server is installed but does not start;
  // when it is not installed, or we are not root, available() is false and
  // says why.
  RabbitServer();
  ~RabbitServer();
  RabbitServer(const RabbitServer&) = delete;
  RabbitServer& operator=(const RabbitServer&) = delete;

  bool available() const { return port_ > 0; }  // it can run (it may be stopped now)
  const std::string& why_not() const { return why_not_; }
  int port() const { return port_; }  // AMQP, on 127.0.0.1
  std::string node() const { return node_; }
  // The broker's one user (pillbox, password()), on the default vhost "/".
  static std::string password() { return "pillbox-test"; }
  std::string url() const { return url_for("pillbox", password(), "%2f"); }
  std::string url_for(const std::string& user, const std::string& password, const std::string& vhost_encoded) const {
    return "amqp://" + user + ":" + password + "@127.0.0.1:" + std::to_string(port_) + "/" + vhost_encoded;
  }

  // Ends the node with `sig` (SIGTERM: a clean shutdown; SIGKILL: a crash)
  // and waits until none of its processes is left.
  void stop(int sig = SIGTERM);
  // Starts it again: same node, ports and Mnesia directory. Fails the test
  // when it does not get ready.
  void start();
  bool running() const { return pid_ > 0; }
  pid_t pid() const { return pid_; }  // beam.smp

  struct CtlResult { int exit_code; std::string out; std::string err; };
  // rabbitmqctl -n NODE ARGS..., in the broker's environment (its Erlang
  // cookie and epmd), waited for.
  CtlResult ctl(const std::vector<std::string>& args) const;
  // The broker's log file (every start's, appended), for a failure's
  // message: what RabbitMQ said of its queues says what no client is told.
  std::string log_file() const { return dir_.file("log/rabbit.log"); }

 private:
  std::vector<std::string> environment() const;
  void start_epmd();

  TempDir dir_;
  std::string node_;
  int port_ = 0;
  int dist_port_ = 0;
  int ctl_port_ = 0;
  int epmd_port_ = 0;
  pid_t epmd_ = 0;
  pid_t pid_ = 0;
  std::thread log_drain_;
  std::string why_not_;
};

}  // namespace e2e
