#pragma once
// `pillbox serve`'s HTTP side on cpp-httplib: the routes of the pages
// (console_pages.h), the API (console_api.h) and the jobs (job_api.h). What
// is refused, and the headers that keep a hostile payload from running in
// the browser: docs/console.md, Hostile payloads.
//
// Reads are open to whoever reaches the address; every POST needs the
// access token (access_token.h): none is 401, another 403. The Host header
// must name the console (a page of another site that a DNS name rebinds
// here is refused). No SO_REUSEPORT (cpp-httplib's default): a second serve
// on the port must fail, not split the requests with the first.
//
// Thread safety: requests run on a pool of threads; the source is used
// under one lock, one request at a time, except for /metrics.
#include <signal.h>

#include <atomic>
#include <memory>
#include <mutex>
#include <optional>
#include <string>

#include "shared/status.h"
#include "supervisor/serve/console_api.h"
#include "supervisor/serve/console_source.h"

namespace httplib {
class Server;
struct Request;
struct Response;
}
namespace pillbox::serve {
class JobBoard;
}

namespace pillbox::serve {

struct ListenAddress {
  std::string host = "127.0.0.1";
  int port = 8080;  // 0: a free port
};
// "HOST:PORT" or "[IPV6]:PORT"; a usage error (kUsage) says the form.
Expected<ListenAddress> parse_listen_address(const std::string& text);
// True for 127.0.0.0/8, ::1 and localhost.
bool is_loopback_host(const std::string& host);

// SIGINT and SIGTERM: what stops serve (run_until_signal).
inline sigset_t stop_signal_set() {
  sigset_t set;
  sigemptyset(&set);
  sigaddset(&set, SIGINT);
  sigaddset(&set, SIGTERM);
  return set;
}

class ConsoleServer {
 public:
  // `source` (the store's or the fleet's quarantine) outlives the server.
  explicit ConsoleServer(ConsoleSource& source);
  ~ConsoleServer();
  ConsoleServer(const ConsoleServer&) = delete;
  ConsoleServer& operator=(const ConsoleServer&) = delete;

  // Binds the address; the port it got. An error (kSetup) names the
  // address and why (in use, not an address of this host).
  Expected<int> bind(const ListenAddress& address);
  // "http://HOST:PORT/" once bound.
  std::string url() const;

  // Serves with `token` until SIGINT or SIGTERM (blocked in the calling
  // thread while it runs and delivered to it alone), then stops accepting
  // and finishes the requests under way. Returns the signal, or an error
  // when serving failed. REQUIRES: bind succeeded; called once.
  Expected<int> run_until_signal(std::string token);

 private:
  void add_routes();
  template <typename Guarded, typename Authorized>
  void add_job_routes(Guarded guarded, Authorized authorized);
  // Why a request is refused before its route runs (its body too large, a
  // Host that is not this console's), or nothing.
  std::optional<ApiReply> refusal(const httplib::Request& req) const;
  // What is refused on the headers alone, before a body is read: refusal(),
  // a method but GET, HEAD and POST, any Transfer-Encoding, a POST without
  // Content-Length or the token, a body on anything but a POST.
  std::optional<ApiReply> header_refusal(const httplib::Request& req) const;
  // Answers `refused`; when the request has a body (or may), with an answer
  // that closes the connection (closing_reply.h), so the body is never read.
  static void refuse(const httplib::Request& req, httplib::Response& res, const ApiReply& refused);

  ConsoleSource& source_;
  std::mutex source_lock_;  // every use of source_ but metrics()
  std::unique_ptr<httplib::Server> http_;
  // The actions that run (console_jobs.h): stopped, and waited for, when
  // serving ends.
  std::unique_ptr<JobBoard> jobs_;
  std::atomic<bool> bundles_building_{false};  // a bundle is built in memory: one at a time
  std::string token_;
  ListenAddress address_;
  bool loopback_ = true;
};

}  // namespace pillbox::serve
