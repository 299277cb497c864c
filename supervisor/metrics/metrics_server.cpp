#include "supervisor/metrics/metrics_server.h"

#include <httplib.h>
#include <sys/socket.h>

#include <atomic>
#include <charconv>
#include <thread>

#include "supervisor/metrics/metrics_text.h"

namespace pillbox::metrics {

// The thread that runs cpp-httplib's accept loop, and whether that loop
// has returned (it returns at once when it cannot start).
struct MetricsServer::Listener {
  std::atomic<bool> returned{false};
  std::thread thread;
};

Expected<ListenAddress> parse_listen_address(std::string_view text) {
  ListenAddress address;
  std::string_view port = text;
  if (const auto colon = text.rfind(':'); colon != std::string_view::npos) {
    std::string_view host = text.substr(0, colon);
    port = text.substr(colon + 1);
    if (host.size() >= 2 && host.front() == '[' && host.back() == ']') host = host.substr(1, host.size() - 2);
    if (host.empty()) return Error{"--metrics: no host before the port in '" + std::string(text) + "'", ErrorCode::kUsage};
    address.host = std::string(host);
  }
  int n = -1;
  const auto [end, ec] = std::from_chars(port.data(), port.data() + port.size(), n);
  if (port.empty() || ec != std::errc() || end != port.data() + port.size() || n < 0 || n > 65535) {
    return Error{"--metrics expects HOST:PORT or PORT (0: any free port), e.g. 127.0.0.1:9464; got '" +
                     std::string(text) + "'",
                 ErrorCode::kUsage};
  }
  address.port = n;
  return address;
}

MetricsServer::MetricsServer(std::unique_ptr<httplib::Server> server, std::string host, int port)
    : server_(std::move(server)), host_(std::move(host)), port_(port), listener_(std::make_unique<Listener>()) {}

Expected<std::unique_ptr<MetricsServer>> MetricsServer::start(const ListenAddress& address, Render render) {
  auto server = std::make_unique<httplib::Server>();
  // Two threads: a scrape and a second client at once; more would only let
  // clients make the process do more work. Each connection serves one
  // request (a slow client holds a thread for the read timeout at most).
  server->new_task_queue = [] { return new httplib::ThreadPool(2); };
  server->set_keep_alive_max_count(1);
  server->set_read_timeout(5, 0);
  server->set_write_timeout(5, 0);
  server->set_payload_max_length(4096);  // GET has no body worth reading
  // cpp-httplib's default sets SO_REUSEPORT, with which a second process
  // (any of this user's) binds the same port and the kernel splits the
  // scrapes between the two. SO_REUSEADDR alone: a port in use is refused,
  // and one left in TIME_WAIT by a run that just ended can be bound again.
  server->set_socket_options([](socket_t sock) {
    const int yes = 1;
    (void)::setsockopt(sock, SOL_SOCKET, SO_REUSEADDR, &yes, sizeof yes);
  });
  server->Get("/metrics", [render](const httplib::Request&, httplib::Response& res) {
    res.set_content(render(), std::string(kContentType).c_str());
  });
  int port = address.port;
  if (port == 0) {
    port = server->bind_to_any_port(address.host);
    if (port < 0) port = 0;
  } else if (!server->bind_to_port(address.host, port)) {
    port = 0;
  }
  if (port == 0) {
    return Error{"--metrics: cannot listen on " + address.host + ":" + std::to_string(address.port) +
                     " (in use, or not an address of this host)",
                 ErrorCode::kUsage};
  }
  std::unique_ptr<MetricsServer> self(new MetricsServer(std::move(server), address.host, port));
  Listener& listener = *self->listener_;
  httplib::Server& s = *self->server_;
  listener.thread = std::thread([&listener, &s] {
    s.listen_after_bind();
    listener.returned = true;
  });
  // cpp-httplib 0.11's stop() does nothing before its accept loop has
  // started (it has no wait_until_ready yet), and the destructor relies on
  // stop(): wait here for the loop, which starts as soon as the thread
  // runs. Clients can connect meanwhile: the socket already listens.
  while (!s.is_running() && !listener.returned) std::this_thread::yield();
  return self;
}

MetricsServer::~MetricsServer() {
  server_->stop();
  if (listener_->thread.joinable()) listener_->thread.join();
}

std::string MetricsServer::url() const {
  const bool v6 = host_.find(':') != std::string::npos;
  return "http://" + (v6 ? "[" + host_ + "]" : host_) + ":" + std::to_string(port_) + "/metrics";
}

}  // namespace pillbox::metrics
