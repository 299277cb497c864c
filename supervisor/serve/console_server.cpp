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
#include "supervisor/serve/access_token.h"
#include "supervisor/serve/closing_reply.h"
#include "supervisor/serve/console_download.h"
#include "supervisor/serve/console_jobs.h"
#include "supervisor/serve/console_pages.h"
#include "supervisor/serve/console_static.h"
#include "supervisor/serve/job_api.h"
#include "supervisor/serve/job_pages.h"
#include "supervisor/serve/job_static.h"

namespace pillbox::serve {
namespace {

// What a client may hold. cpp-httplib holds one worker thread per
// connection from its first byte to its close; with its default pool
// (max(8, cores - 1)), 8 idle clients held every worker for the 5 s
// keep-alive wait and the console answered no one. A client that trickles a
// byte every few seconds still holds its worker (cpp-httplib 0.11 has no
// deadline for a whole request), but only one of kWorkers.
constexpr std::size_t kWorkers = 32;
constexpr time_t kKeepAliveSeconds = 2;
constexpr time_t kReadWriteSeconds = 10;

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

std::string json_text(const ApiReply& reply) {
  return reply.body.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
}

void send_json(httplib::Response& res, const ApiReply& reply) {
  res.status = reply.status;
  if (reply.status == 401) res.set_header("WWW-Authenticate", "Bearer");
  res.set_content(json_text(reply), "application/json");
}

// The token of an action (a POST), before anything is read or changed.
std::optional<ApiReply> token_refusal(const httplib::Request& req, const std::string& token) {
  switch (check_authorization(req.get_header_value("Authorization"), token)) {
    case TokenCheck::kMissing:
      return ApiReply{401, {{"error", "this action needs Authorization: Bearer TOKEN (the token is in the file "
                                      "pillbox serve named on stderr when it started: serve.token in a store, "
                                      "serve-redis-HASH.token or serve-amqp-HASH.token for a fleet's, or "
                                      "--token-file)"}}};
    case TokenCheck::kWrong:
      return ApiReply{403, {{"error", "wrong access token (a new one is written on every start of pillbox serve)"}}};
    case TokenCheck::kGood:
      break;
  }
  return std::nullopt;
}

void send_page(httplib::Response& res, const Page& page) {
  res.status = page.status;
  res.set_content(page.html, "text/html; charset=utf-8");
}

Query query_of(const httplib::Request& req) { return Query(req.params.begin(), req.params.end()); }

// JSON under /api/, a page elsewhere.
void send_error(const httplib::Request& req, httplib::Response& res, int status, const std::string& message) {
  if (req.path.rfind("/api/", 0) == 0) return send_json(res, error_reply(status, message));
  send_page(res, error_page(status, message));
}

// The one bundle being built, while this lives (taken() says whether it was free).
class BundleSlot {
 public:
  explicit BundleSlot(std::atomic<bool>& building) : building_(building), taken_(!building.exchange(true)) {}
  ~BundleSlot() {
    if (taken_) building_.store(false);
  }
  BundleSlot(const BundleSlot&) = delete;
  BundleSlot& operator=(const BundleSlot&) = delete;
  bool taken() const { return taken_; }

 private:
  std::atomic<bool>& building_;
  const bool taken_;
};

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

// A request that carries a body, or may: cpp-httplib reads it only after
// the pre-routing handler, so a refusal there must close the connection
// (closing_reply.h), or the body would be read as more requests. Any
// Transfer-Encoding counts (cpp-httplib takes "Chunked" as chunked, and
// reads other codings to the end of the connection).
bool has_body(const httplib::Request& req) {
  if (req.has_header("Transfer-Encoding")) return true;
  const std::string length = req.get_header_value("Content-Length");
  return !length.empty() && length.find_first_not_of('0') != std::string::npos;
}

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

ConsoleServer::ConsoleServer(ConsoleSource& source)
    : source_(source),
      http_(std::make_unique<httplib::Server>()),
      jobs_(std::make_unique<JobBoard>(JobBoard::self_program(), source.cli_source_args(), source.cli_source_env())) {}

ConsoleServer::~ConsoleServer() = default;

Expected<int> ConsoleServer::bind(const ListenAddress& address) {
  // SO_REUSEADDR only: a restart may reuse the port of connections still in
  // TIME_WAIT, but a second listener on it fails (see the header).
  http_->set_socket_options([](int sock) {
    int yes = 1;
    ::setsockopt(sock, SOL_SOCKET, SO_REUSEADDR, &yes, sizeof yes);
  });
  http_->new_task_queue = [] { return new httplib::ThreadPool(kWorkers); };
  http_->set_keep_alive_timeout(kKeepAliveSeconds);
  http_->set_read_timeout(kReadWriteSeconds);
  http_->set_write_timeout(kReadWriteSeconds);
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
  // The body: by what was read, or by the Content-Length of one not read yet.
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

std::optional<ApiReply> ConsoleServer::header_refusal(const httplib::Request& req) const {
  std::optional<ApiReply> refused = refusal(req);
  if (refused) return refused;
  if (req.method != "GET" && req.method != "HEAD" && req.method != "POST") {
    return ApiReply{405, {{"error", "this console answers GET and POST, not " + req.method.substr(0, 16)}}};
  }
  // A body is taken by its Content-Length alone: cpp-httplib reads any
  // other (chunked, or to the end of the connection) with no limit of ours.
  if (req.has_header("Transfer-Encoding")) {
    return ApiReply{411, {{"error", "send a body with Content-Length, not Transfer-Encoding"}}};
  }
  if (req.method == "POST") {
    if (!req.has_header("Content-Length")) {
      return ApiReply{411, {{"error", "a POST needs Content-Length (0 for none)"}}};
    }
    return token_refusal(req, token_);
  }
  if (has_body(req)) return ApiReply{400, {{"error", "only a POST carries a body here"}}};
  return std::nullopt;
}

void ConsoleServer::refuse(const httplib::Request& req, httplib::Response& res, const ApiReply& refused) {
  // A refusal is the whole answer, never a part of it (a Range would make it
  // a 206 of what the body is not).
  auto& request = const_cast<httplib::Request&>(req);  // cpp-httplib's own, not const: hands it out as const
  request.ranges.clear();
  if (!has_body(req) && req.method != "HEAD" && (req.method == "GET" || req.method == "POST")) {
    return send_json(res, refused);
  }
  // Its body must never be read: an answer that closes the connection. A
  // HEAD's answer has no body, so no provider would run: answered as a GET.
  if (req.method == "HEAD") request.method = "GET";
  if (refused.status == 401) res.set_header("WWW-Authenticate", "Bearer");
  send_and_close(res, refused.status, json_text(refused), "application/json");
}

void ConsoleServer::add_routes() {
  using httplib::Request;
  using httplib::Response;
  http_->set_default_headers(kSecurityHeaders);
  // cpp-httplib has one limit for every route: the patch's. Other routes
  // are held to kMaxBodyBytes by their Content-Length below, before the
  // body is read, and by the size of what was read (a chunked body).
  http_->set_payload_max_length(kMaxPatchBodyBytes);

  // Refused on the headers alone, before any body is read.
  http_->set_pre_routing_handler([this](const Request& req, Response& res) {
    std::optional<ApiReply> refused = header_refusal(req);
    if (!refused) return httplib::Server::HandlerResponse::Unhandled;
    refuse(req, res, *refused);
    return httplib::Server::HandlerResponse::Handled;
  });
  // "Expect: 100-continue" is answered before the pre-routing handler: the
  // same checks, so that a refused client is never invited to send its body.
  http_->set_expect_100_continue_handler([this](const Request& req, Response& res) {
    std::optional<ApiReply> refused = header_refusal(req);
    if (!refused) return 100;
    refuse(req, res, *refused);
    return refused->status;
  });
  // Unknown paths and methods, and errors cpp-httplib itself found (a body
  // too large). Replies of the handlers keep their own body, and a closing
  // reply its provider.
  http_->set_error_handler(httplib::Server::HandlerWithResponse([](const Request& req, Response& res) {
    if (!res.body.empty() || is_closing_reply(res)) return httplib::Server::HandlerResponse::Unhandled;
    const std::string what = res.status == 404 ? "no such page: " + req.path
                             : res.status == 413 ? (is_patch(req) ? kPatchTooLarge : "request body too large")
                                                 : "request refused (HTTP " + std::to_string(res.status) + ")";
    send_error(req, res, res.status, what);
    return httplib::Server::HandlerResponse::Handled;
  }));
  http_->set_exception_handler(
      [](const Request& req, Response& res, std::exception_ptr) { send_error(req, res, 500, "internal error"); });

  // Every route checks the request again (defence in depth: the
  // pre-routing handler above refused it already) before anything else.
  auto guarded = [this](auto fn) {
    return [this, fn](const Request& req, Response& res) {
      if (auto refused = refusal(req)) return send_json(res, *refused);
      fn(req, res);
    };
  };
  // A store whose file went away or was replaced (store_presence.h): 503,
  // never what the old file still holds.
  auto store_gone = [this](const Request& req, Response& res) {
    const auto problem = source_.unavailable();
    if (problem) send_error(req, res, 503, *problem);
    return problem.has_value();
  };
  // Each route that reads the quarantine takes the lock around the source's call.
  auto locked = [this, guarded, store_gone](auto fn) {
    return guarded([this, fn, store_gone](const Request& req, Response& res) {
      std::lock_guard<std::mutex> hold(source_lock_);
      if (store_gone(req, res)) return;
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
  http_->Get("/", locked([this](const Request& req, Response& res) { send_page(res, list_page(source_, query_of(req))); }));
  http_->Get("/groups",
             locked([this](const Request& req, Response& res) { send_page(res, groups_page(source_, query_of(req))); }));
  http_->Get("/tasks",
             locked([this](const Request& req, Response& res) { send_page(res, tasks_page(source_, query_of(req))); }));
  http_->Get("/runs", locked([this](const Request&, Response& res) { send_page(res, runs_page(source_)); }));
  http_->Get(R"(/records/([^/]+))", locked([this](const Request& req, Response& res) {
               send_page(res, record_page(source_, req.matches[1]));
             }));

  // Prometheus: the source's gauges, not under the lock (console_source.h).
  http_->Get("/metrics", guarded([this](const Request&, Response& res) {
    res.set_content(source_.metrics(), std::string(metrics::kContentType));
  }));
  http_->Get("/api/records",
             locked([this](const Request& req, Response& res) { send_json(res, source_.list_records(query_of(req))); }));
  http_->Get("/api/stats",
             locked([this](const Request& req, Response& res) { send_json(res, source_.record_stats(query_of(req))); }));
  http_->Get("/api/tasks",
             locked([this](const Request& req, Response& res) { send_json(res, source_.list_tasks(query_of(req))); }));
  http_->Get("/api/runs", locked([this](const Request&, Response& res) { send_json(res, source_.live_runs()); }));
  http_->Get(R"(/api/records/([^/]+))", locked([this](const Request& req, Response& res) {
               send_json(res, source_.show_record(req.matches[1]));
             }));
  // Downloads: found under the lock, read after it (console_download.h).
  auto download = [this, guarded, store_gone](bool bundle, const char* type) {
    return guarded([this, bundle, type, store_gone](const Request& req, Response& res) {
      PendingDownload pending;
      {
        std::lock_guard<std::mutex> hold(source_lock_);
        if (store_gone(req, res)) return;
        pending = source_.find_download(req.matches[1], bundle);
      }
      // A bundle is built in memory: one at a time (console_download.h).
      std::optional<BundleSlot> slot;
      if (bundle) {
        slot.emplace(bundles_building_);
        if (!slot->taken()) {
          return send_json(res, {429, {{"error", "another bundle is being built; ask again when it is done"}}});
        }
      }
      DownloadReply p = finish_download(pending);
      if (p.error.status != 200) return send_json(res, p.error);
      res.set_header("Content-Disposition", "attachment; filename=\"" + p.file_name + "\"");
      if (!p.file) return res.set_content(std::move(p.bytes), type);
      res.set_content_provider(p.size, type, [file = p.file](std::size_t offset, std::size_t length,
                                                             httplib::DataSink& sink) {
        return send_file_range(*file, offset, length, sink.write);
      });
    });
  };
  http_->Get(R"(/api/records/([^/]+)/payload)", download(false, "application/octet-stream"));
  http_->Get(R"(/api/records/([^/]+)/bundle)", download(true, "application/gzip"));
  // The token before anything else: without it, nothing is read or changed.
  auto authorized = [this](const Request& req, Response& res) {
    const auto refused = token_refusal(req, token_);
    if (refused) send_json(res, *refused);
    return !refused;
  };
  http_->Post(R"(/api/records/([^/]+)/discard)", guarded([this, authorized, store_gone](const Request& req, Response& res) {
    if (!authorized(req, res)) return;
    std::lock_guard<std::mutex> hold(source_lock_);
    if (store_gone(req, res)) return;
    send_json(res, source_.discard(req.matches[1], req.body, "web: " + req.remote_addr));
  }));
  http_->Post(R"(/api/records/([^/]+)/allow)", guarded([this, authorized, store_gone](const Request& req, Response& res) {
    if (!authorized(req, res)) return;
    std::lock_guard<std::mutex> hold(source_lock_);
    if (store_gone(req, res)) return;
    send_json(res, source_.allow(req.matches[1], req.body, "web: " + req.remote_addr));
  }));
  http_->Post(R"(/api/records/([^/]+)/patch)", guarded([this, authorized, store_gone](const Request& req, Response& res) {
    if (!authorized(req, res)) return;
    std::lock_guard<std::mutex> hold(source_lock_);
    if (store_gone(req, res)) return;
    send_json(res, source_.patch(req.matches[1], req.body, "web: " + req.remote_addr));
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
  const IdCheck check_id = [this](const std::string& text) { return source_.checked_id(text); };
  auto action = [guarded, authorized](auto start) {
    return guarded([authorized, start](const Request& req, Response& res) {
      if (!authorized(req, res)) return;
      send_json(res, start(req, "web: " + req.remote_addr));
    });
  };
  http_->Post(R"(/api/records/([^/]+)/reproduce)", action([this, check_id](const Request& req, const std::string& actor) {
                return start_reproduce(*jobs_, check_id, req.matches[1], req.body, actor);
              }));
  http_->Post(R"(/api/records/([^/]+)/minimize)", action([this, check_id](const Request& req, const std::string& actor) {
                return start_minimize(*jobs_, check_id, req.matches[1], req.body, actor);
              }));
  http_->Post("/api/replay", action([this, check_id](const Request& req, const std::string& actor) {
                return start_replay(*jobs_, check_id, req.body, actor);
              }));
  http_->Post(R"(/api/jobs/([^/]+)/stop)", action([this](const Request& req, const std::string&) {
                return jobs_->stop(req.matches[1]);
              }));
}

Expected<int> ConsoleServer::run_until_signal(std::string token) {
  token_ = std::move(token);
  add_routes();
  const sigset_t stop_set = stop_signal_set();
  sigset_t old_set;
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
