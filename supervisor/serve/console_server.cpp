#include "supervisor/serve/console_server.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <pthread.h>
#include <signal.h>
#include <sys/socket.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <chrono>
#include <condition_variable>
#include <cstring>
#include <httplib.h>
#include <optional>
#include <thread>

#include "supervisor/metrics/metrics_text.h"
#include "supervisor/metrics/store_metrics_reader.h"
#include "supervisor/serve/access_token.h"
#include "supervisor/serve/console_jobs.h"
#include "supervisor/serve/console_pages.h"
#include "supervisor/serve/console_static.h"
#include "supervisor/serve/job_api.h"
#include "supervisor/serve/job_pages.h"
#include "supervisor/serve/job_static.h"

namespace pillbox::serve {
namespace {

// The largest request body read (a discard's reason is at most 4 KiB),
// except a patch's, which may carry a payload (kMaxPatchBodyBytes).
constexpr std::size_t kMaxBodyBytes = 64 * 1024;

bool is_patch(const httplib::Request& req) {
  const std::string& p = req.path;
  return req.method == "POST" && p.rfind("/api/records/", 0) == 0 && p.size() > 6 &&
         p.compare(p.size() - 6, 6, "/patch") == 0;
}

// Every response: no script, style, frame or form target from anywhere but
// the console itself, no inline script (a payload that slipped through
// escaping still could not run), no guessing of content types.
const httplib::Headers kSecurityHeaders = {
    {"Content-Security-Policy", "default-src 'self'; base-uri 'none'; frame-ancestors 'none'; form-action 'self'"},
    {"X-Content-Type-Options", "nosniff"},
    {"Referrer-Policy", "no-referrer"},
    {"X-Frame-Options", "DENY"},
    {"Cache-Control", "no-store"},
};

void send_json(httplib::Response& res, const ApiReply& reply) {
  res.status = reply.status;
  res.set_content(reply.body.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace), "application/json");
}

void send_page(httplib::Response& res, const Page& page) {
  res.status = page.status;
  res.set_content(page.html, "text/html; charset=utf-8");
}

Query query_of(const httplib::Request& req) { return Query(req.params.begin(), req.params.end()); }

bool is_api(const httplib::Request& req) { return req.path.rfind("/api/", 0) == 0; }

}  // namespace

Expected<ListenAddress> parse_listen_address(const std::string& text) {
  const Error usage{"--listen expects HOST:PORT (127.0.0.1:8080, [::1]:8080; port 0 for a free one), got '" + text + "'",
                    ErrorCode::kUsage};
  ListenAddress a;
  std::string port;
  if (!text.empty() && text[0] == '[') {
    const auto close = text.find("]:");
    if (close == std::string::npos) return usage;
    a.host = text.substr(1, close - 1);
    port = text.substr(close + 2);
  } else {
    const auto colon = text.rfind(':');
    if (colon == std::string::npos || text.find(':') != colon) return usage;
    a.host = text.substr(0, colon);
    port = text.substr(colon + 1);
  }
  if (a.host.empty() || port.empty() || port.size() > 5 || port.find_first_not_of("0123456789") != std::string::npos) {
    return usage;
  }
  a.port = std::stoi(port);
  if (a.port > 65535) return usage;
  return a;
}

bool is_loopback_host(const std::string& host) {
  if (host == "localhost") return true;
  in_addr v4{};
  if (::inet_pton(AF_INET, host.c_str(), &v4) == 1) return (ntohl(v4.s_addr) >> 24) == 127;
  in6_addr v6{};
  return ::inet_pton(AF_INET6, host.c_str(), &v6) == 1 && IN6_IS_ADDR_LOOPBACK(&v6);
}

namespace {

// An IP literal: what a page of another site can never send as Host (its
// DNS name, rebound to this address, is what it sends).
bool is_ip_literal(const std::string& name) {
  in_addr v4{};
  in6_addr v6{};
  if (::inet_pton(AF_INET, name.c_str(), &v4) == 1) return true;
  return name.size() > 2 && name.front() == '[' && name.back() == ']' &&
         ::inet_pton(AF_INET6, name.substr(1, name.size() - 2).c_str(), &v6) == 1;
}

std::string this_host_name() {
  char name[256] = {};
  ::gethostname(name, sizeof name - 1);
  return name;
}

// A request that carries a body: cpp-httplib reads it only after the
// pre-routing handler, so a refusal there would leave it on the connection,
// to be read as more requests.
bool has_body(const httplib::Request& req) {
  if (req.get_header_value("Transfer-Encoding").find("chunked") != std::string::npos) return true;
  const std::string length = req.get_header_value("Content-Length");
  return !length.empty() && length.find_first_not_of('0') != std::string::npos;
}

}  // namespace

ConsoleServer::ConsoleServer(ConsoleStore store)
    : store_(std::move(store)),
      http_(std::make_unique<httplib::Server>()),
      jobs_(std::make_unique<JobBoard>(JobBoard::self_program(), std::vector<std::string>{"--store", store_.dir})) {}

ConsoleServer::~ConsoleServer() = default;

Expected<int> ConsoleServer::bind(const ListenAddress& address) {
  // SO_REUSEADDR only: a restart may reuse the port of connections still in
  // TIME_WAIT, but a second listener on it fails (see the header).
  http_->set_socket_options([](int sock) {
    int yes = 1;
    ::setsockopt(sock, SOL_SOCKET, SO_REUSEADDR, &yes, sizeof yes);
  });
  errno = 0;
  int port = address.port;
  if (address.port == 0) {
    port = http_->bind_to_any_port(address.host);
  } else if (!http_->bind_to_port(address.host, address.port)) {
    port = -1;
  }
  if (port <= 0) {
    const std::string why = errno != 0 ? std::strerror(errno) : "not an address of this host";
    return Error{"cannot listen on " + address.host + ":" + std::to_string(address.port) + ": " + why +
                 (errno == EADDRINUSE ? " (another pillbox serve, or another program, is using the port)" : "")};
  }
  address_ = address;
  address_.port = port;
  loopback_ = is_loopback_host(address.host);
  return port;
}

std::string ConsoleServer::url() const {
  const bool v6 = address_.host.find(':') != std::string::npos;
  return "http://" + (v6 ? "[" + address_.host + "]" : address_.host) + ":" + std::to_string(address_.port) + "/";
}

std::optional<ApiReply> ConsoleServer::refusal(const httplib::Request& req) const {
  // The body: by what was read, or what a request without one yet says it
  // will send. A patch may carry a payload; every other body is small.
  const std::size_t limit = is_patch(req) ? kMaxPatchBodyBytes : kMaxBodyBytes;
  const std::string length = req.get_header_value("Content-Length");
  if (req.body.size() > limit || length.size() > 12 || length.find_first_not_of("0123456789") != std::string::npos ||
      (!length.empty() && std::stoull(length) > limit)) {
    return ApiReply{413, {{"error", is_patch(req) ? kPatchTooLarge : "request body too large"}}};
  }
  // The Host a browser sent: a page of another site whose DNS name now
  // points at this address sends that name. Answered: localhost, an IP
  // literal (no DNS name), this host's own name when not on loopback, each
  // with this port. Without a Host (HTTP/1.0 clients, not browsers): answered.
  if (!req.has_header("Host")) return std::nullopt;
  const std::string host = req.get_header_value("Host");
  const std::string port = ":" + std::to_string(address_.port);
  if (host.size() > port.size() && host.compare(host.size() - port.size(), port.size(), port) == 0) {
    const std::string name = host.substr(0, host.size() - port.size());
    if (name == "localhost" || is_ip_literal(name) || (!loopback_ && name == this_host_name())) return std::nullopt;
  }
  return ApiReply{403, {{"error", "this console answers to localhost, an IP address" +
                                      std::string(loopback_ ? "" : " or this host's name (" + this_host_name() + ")") +
                                      ", with port " + std::to_string(address_.port) + " (Host: 127.0.0.1" + port +
                                      "): not to another name, which may be a page of another site"}}};
}

void ConsoleServer::add_routes() {
  using httplib::Request;
  using httplib::Response;
  http_->set_default_headers(kSecurityHeaders);
  // cpp-httplib has one limit for every route: the patch's. Other routes
  // are held to kMaxBodyBytes by their Content-Length below, before the
  // body is read, and by the size of what was read (a chunked body).
  http_->set_payload_max_length(kMaxPatchBodyBytes);

  // A loopback console answers only to its own names: a page of another
  // site whose DNS name now points at 127.0.0.1 sends that name as Host.
  // Refused early only when the request has no body (has_body); one with a
  // body is refused by its route (guarded, below) once it is read, within
  // the library's own limit (kMaxPatchBodyBytes, its 413 closes the
  // connection).
  http_->set_pre_routing_handler([this](const Request& req, Response& res) {
    if (has_body(req)) return httplib::Server::HandlerResponse::Unhandled;
    if (auto refused = refusal(req)) {
      send_json(res, *refused);
      return httplib::Server::HandlerResponse::Handled;
    }
    return httplib::Server::HandlerResponse::Unhandled;
  });
  // Unknown paths and methods, and errors cpp-httplib itself found (a body
  // too large): JSON under /api/, a page elsewhere. Replies of the
  // handlers keep their own body.
  http_->set_error_handler(httplib::Server::HandlerWithResponse([](const Request& req, Response& res) {
    if (!res.body.empty()) return httplib::Server::HandlerResponse::Unhandled;
    const std::string what = res.status == 404 ? "no such page: " + req.path
                             : res.status == 413 ? (is_patch(req) ? kPatchTooLarge : "request body too large")
                                                 : "request refused (HTTP " + std::to_string(res.status) + ")";
    if (is_api(req)) {
      send_json(res, {res.status, {{"error", what}}});
    } else {
      send_page(res, error_page(res.status, what));
    }
    return httplib::Server::HandlerResponse::Handled;
  }));
  http_->set_exception_handler([](const Request& req, Response& res, std::exception_ptr) {
    if (is_api(req)) {
      send_json(res, {500, {{"error", "internal error"}}});
    } else {
      send_page(res, error_page(500, "internal error"));
    }
  });

  // Every route checks the request again (a request with a body reaches it
  // unchecked, see above) before anything else.
  auto guarded = [this](auto fn) {
    return [this, fn](const Request& req, Response& res) {
      if (auto refused = refusal(req)) return send_json(res, *refused);
      fn(req, res);
    };
  };
  // Each route that reads the store takes its lock around the library call.
  auto locked = [this, guarded](auto fn) {
    return guarded([this, fn](const Request& req, Response& res) {
      std::lock_guard<std::mutex> hold(store_lock_);
      fn(req, res);
    });
  };
  http_->Get("/static/console.css", guarded([](const Request&, Response& res) {
               static const std::string style = std::string(kConsoleCss) + std::string(kJobsCss);
               res.set_content(style, "text/css; charset=utf-8");
             }));
  http_->Get("/static/console.js", guarded([](const Request&, Response& res) {
               static const std::string script = std::string(kConsoleJs) + std::string(kJobsJs);
               res.set_content(script, "text/javascript; charset=utf-8");
             }));
  http_->Get("/", locked([this](const Request& req, Response& res) { send_page(res, list_page(store_, query_of(req))); }));
  http_->Get("/groups",
             locked([this](const Request& req, Response& res) { send_page(res, groups_page(store_, query_of(req))); }));
  http_->Get("/tasks",
             locked([this](const Request& req, Response& res) { send_page(res, tasks_page(store_, query_of(req))); }));
  http_->Get("/runs", locked([this](const Request&, Response& res) { send_page(res, runs_page(store_)); }));
  http_->Get(R"(/records/([^/]+))", locked([this](const Request& req, Response& res) {
               send_page(res, record_page(store_, req.matches[1]));
             }));

  // Prometheus: what the store holds (supervisor/metrics/store_metrics.h),
  // and pillbox_store_up 0 while it cannot be read.
  metrics_ = std::make_unique<metrics::StoreMetricsReader>(store_.dir);
  http_->Get("/metrics", guarded([this](const Request&, Response& res) {
    const std::string store = metrics_->text();
    metrics::MetricsText text;
    text.family("pillbox_store_up", "1 when this answer has the store in it, 0 when it cannot be read.",
                metrics::MetricType::kGauge);
    text.sample("pillbox_store_up", {}, store.empty() ? 0 : 1);
    res.set_content(text.text() + store, std::string(metrics::kContentType));
  }));
  http_->Get("/api/records",
             locked([this](const Request& req, Response& res) { send_json(res, list_records(store_, query_of(req))); }));
  http_->Get("/api/stats",
             locked([this](const Request& req, Response& res) { send_json(res, record_stats(store_, query_of(req))); }));
  http_->Get("/api/tasks",
             locked([this](const Request& req, Response& res) { send_json(res, list_tasks(store_, query_of(req))); }));
  http_->Get("/api/runs", locked([this](const Request&, Response& res) { send_json(res, live_runs(store_)); }));
  http_->Get(R"(/api/records/([^/]+))", locked([this](const Request& req, Response& res) {
               send_json(res, show_record(store_, req.matches[1]));
             }));
  http_->Get(R"(/api/records/([^/]+)/payload)", locked([this](const Request& req, Response& res) {
               PayloadReply p = record_payload(store_, req.matches[1]);
               if (p.error.status != 200) return send_json(res, p.error);
               res.set_header("Content-Disposition", "attachment; filename=\"" + p.file_name + "\"");
               res.set_content(std::move(p.bytes), "application/octet-stream");
             }));
  // The token before anything else: without it, nothing is read or changed.
  auto authorized = [this](const Request& req, Response& res) {
    switch (check_authorization(req.get_header_value("Authorization"), token_)) {
      case TokenCheck::kMissing:
        res.set_header("WWW-Authenticate", "Bearer");
        send_json(res, {401, {{"error", "this action needs Authorization: Bearer TOKEN (the token is in "
                                        "serve.token in the store directory)"}}});
        return false;
      case TokenCheck::kWrong:
        send_json(res, {403, {{"error", "wrong access token (serve.token changes on every start of pillbox serve)"}}});
        return false;
      case TokenCheck::kGood:
        break;
    }
    return true;
  };
  http_->Post(R"(/api/records/([^/]+)/discard)", guarded([this, authorized](const Request& req, Response& res) {
    if (!authorized(req, res)) return;
    std::lock_guard<std::mutex> hold(store_lock_);
    send_json(res, discard_record(store_, req.matches[1], req.body, "web: " + req.remote_addr));
  }));
  http_->Post(R"(/api/records/([^/]+)/patch)", guarded([this, authorized](const Request& req, Response& res) {
    if (!authorized(req, res)) return;
    std::lock_guard<std::mutex> hold(store_lock_);
    send_json(res, patch_record(store_, req.matches[1], req.body, "web: " + req.remote_addr));
  }));
  add_job_routes(guarded, authorized);
}

// The actions that run (job_api.h): the board, not the store, so no store lock.
template <typename Guarded, typename Authorized>
void ConsoleServer::add_job_routes(Guarded guarded, Authorized authorized) {
  using httplib::Request;
  using httplib::Response;
  http_->Get("/jobs", guarded([this](const Request&, Response& res) { send_page(res, jobs_page(*jobs_)); }));
  http_->Get(R"(/jobs/([^/]+))",
             guarded([this](const Request& req, Response& res) { send_page(res, job_page(*jobs_, req.matches[1])); }));
  http_->Get("/api/jobs", guarded([this](const Request&, Response& res) { send_json(res, jobs_->list()); }));
  http_->Get(R"(/api/jobs/([^/]+))",
             guarded([this](const Request& req, Response& res) { send_json(res, jobs_->show(req.matches[1])); }));
  auto action = [this, guarded, authorized](auto start) {
    return guarded([this, authorized, start](const Request& req, Response& res) {
      if (!authorized(req, res)) return;
      send_json(res, start(req, "web: " + req.remote_addr));
    });
  };
  http_->Post(R"(/api/records/([^/]+)/reproduce)", action([this](const Request& req, const std::string& actor) {
                return start_reproduce(*jobs_, req.matches[1], req.body, actor);
              }));
  http_->Post(R"(/api/records/([^/]+)/minimize)", action([this](const Request& req, const std::string& actor) {
                return start_minimize(*jobs_, req.matches[1], req.body, actor);
              }));
  http_->Post("/api/replay", action([this](const Request& req, const std::string& actor) {
                return start_replay(*jobs_, req.body, actor);
              }));
  http_->Post(R"(/api/jobs/([^/]+)/stop)", action([this](const Request& req, const std::string&) {
                return jobs_->stop(req.matches[1]);
              }));
}

Expected<int> ConsoleServer::run_until_signal(std::string token) {
  token_ = std::move(token);
  add_routes();
  sigset_t stop_set, old_set;
  sigemptyset(&stop_set);
  sigaddset(&stop_set, SIGINT);
  sigaddset(&stop_set, SIGTERM);
  // Blocked here before any thread starts: the server's threads inherit the
  // mask, so the signal waits for sigwait below instead of killing pillbox.
  pthread_sigmask(SIG_BLOCK, &stop_set, &old_set);
  std::mutex done_lock;
  std::condition_variable done_changed;
  bool done = false;
  bool served = false;
  const pthread_t waiter = pthread_self();
  std::thread listener([&] {
    const bool ok = http_->listen_after_bind();
    {
      std::lock_guard<std::mutex> hold(done_lock);
      done = true;
      served = ok;
    }
    done_changed.notify_all();
    // Sent whenever it ends: when it ended by itself (accept failed) this
    // wakes the sigwait below; after stop() it is taken below, unused.
    pthread_kill(waiter, SIGTERM);
  });
  int sig = 0;
  sigwait(&stop_set, &sig);
  bool ended_by_itself = false;
  // stop() acts only once the server runs: repeated until the listener has
  // ended, in case the signal came before it started.
  {
    std::unique_lock<std::mutex> hold(done_lock);
    ended_by_itself = done;
    while (!done) {
      http_->stop();
      done_changed.wait_for(hold, std::chrono::milliseconds(50));
    }
  }
  listener.join();
  // No job outlives the console: SIGTERM to each, and wait (a replay gives
  // back its records first).
  jobs_->stop_all();
  // The listener's wake-up signal may be pending still (it came after the
  // signal that stopped us): taken here, so that restoring the mask does
  // not deliver it.
  sigset_t pending;
  sigemptyset(&pending);
  sigpending(&pending);
  if (sigismember(&pending, SIGTERM)) {
    sigset_t term;
    sigemptyset(&term);
    sigaddset(&term, SIGTERM);
    int taken = 0;
    sigwait(&term, &taken);
  }
  pthread_sigmask(SIG_SETMASK, &old_set, nullptr);
  if (ended_by_itself && !served) return Error{"the server stopped accepting connections (" + url() + ")"};
  return sig;
}

}  // namespace pillbox::serve
