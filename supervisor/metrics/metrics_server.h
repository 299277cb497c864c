#pragma once
// `GET /metrics` over HTTP on threads of its own (cpp-httplib), for
// `run --metrics ADDR` and `worker --metrics ADDR`. The address is bound
// before the run starts, so a port in use is a usage error, not a run
// without metrics. The run never waits for a scrape (run_metrics.h,
// store_metrics_reader.h). Other paths and methods get cpp-httplib's 404.
#include <functional>
#include <memory>
#include <string>
#include <string_view>

#include "shared/status.h"

namespace httplib {
class Server;
}

namespace pillbox::metrics {

struct ListenAddress {
  std::string host = "127.0.0.1";
  int port = 0;  // 0: the kernel picks a free one
};

// "HOST:PORT", "[IPV6]:PORT", or "PORT" alone (on 127.0.0.1: loopback
// unless the operator names another address). Errors (usage): a missing or
// out-of-range port, an empty host.
Expected<ListenAddress> parse_listen_address(std::string_view text);

class MetricsServer {
 public:
  // The body of one answer: the whole text, in the exposition format.
  using Render = std::function<std::string()>;

  // Binds `address` and starts serving. Errors (usage): the address cannot
  // be bound (in use, not local, not resolvable).
  static Expected<std::unique_ptr<MetricsServer>> start(const ListenAddress& address, Render render);
  ~MetricsServer();  // stops serving; waits for the server's threads
  MetricsServer(const MetricsServer&) = delete;
  MetricsServer& operator=(const MetricsServer&) = delete;

  int port() const { return port_; }
  // http://HOST:PORT/metrics, an IPv6 host in brackets.
  std::string url() const;

 private:
  MetricsServer(std::unique_ptr<httplib::Server> server, std::string host, int port);
  std::unique_ptr<httplib::Server> server_;
  std::string host_;
  int port_;
  struct Listener;
  std::unique_ptr<Listener> listener_;
};

}  // namespace pillbox::metrics
