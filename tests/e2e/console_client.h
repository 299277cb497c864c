#pragma once
// What the console's end-to-end tests (console_test.cpp over a store,
// console_fleet_test.cpp over the fleet's quarantine) drive `pillbox serve`
// with: the process in the background, its JSON answers, and headless
// Chromium: a page's rendering, or a browser driven over DevTools (Browser).
#include <doctest/doctest.h>
#include <fcntl.h>
#include <poll.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <httplib.h>
#include <map>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "shared/base64.h"
#include "tests/e2e/background.h"
#include "tests/e2e/support.h"

namespace e2e {

// `pillbox serve` running in the background (e2e::Background); the
// constructor waits for its first line of stdout (the URL) or its end.
class Serve {
 public:
  // pillbox serve --store STORE --listen LISTEN.
  Serve(const std::string& store, const std::string& listen = "127.0.0.1:0")
      : Serve(std::vector<std::string>{"--store", store, "--listen", listen}) {}
  // pillbox serve ARGS..., the environment the test's plus `env`.
  explicit Serve(const std::vector<std::string>& args, const std::map<std::string, std::string>& env = {})
      : process_(pillbox_binary(), with_verb(args), env) {
    // The first line, or what it printed when it exits before printing one.
    std::string out;
    const bool done = eventually([&] {
      const bool ended = process_.ended();  // before reading: its last words are in
      out = process_.out();
      return ended || out.find('\n') != std::string::npos;
    });
    REQUIRE_MESSAGE(done, "pillbox serve printed no URL within 60 s");
    url_ = out.substr(0, out.find('\n'));
  }

  const std::string& url() const { return url_; }  // "" when it printed none
  int port() const { return std::atoi(url_.substr(url_.rfind(':') + 1).c_str()); }
  std::string err() const { return process_.err(); }
  pid_t pid() const { return process_.pid(); }
  bool running() { return !process_.ended(); }
  // Sends `sig` and waits for the exit; its exit code (128 + signal when killed).
  int stop(int sig) {
    process_.signal(sig);
    return wait();
  }
  int wait() { return process_.wait(); }

 private:
  static std::vector<std::string> with_verb(std::vector<std::string> args) {
    args.insert(args.begin(), "serve");
    return args;
  }
  Background process_;
  std::string url_;
};

// Where `serve` said its access token is (its stderr: "actions need the
// token in FILE; Ctrl-C stops"), and the token in it.
inline std::string token_file_of(const Serve& serve) {
  const std::string err = serve.err();
  const std::string before = "actions need the token in ";
  const auto at = err.find(before);
  REQUIRE(at != std::string::npos);
  return err.substr(at + before.size(), err.find("; Ctrl-C", at) - at - before.size());
}
inline std::string token_of(const Serve& serve) {
  std::string t = read_file(token_file_of(serve));
  while (!t.empty() && t.back() == '\n') t.pop_back();
  return t;
}

// The sample of `series` (name{labels}) in a Prometheus text, or -1.
inline long long metric_sample(const std::string& text, const std::string& series) {
  const auto at = text.find("\n" + series + " ");
  if (at == std::string::npos) return -1;
  return std::stoll(text.substr(at + series.size() + 2));
}

inline nlohmann::json body_of(const httplib::Result& r) {
  REQUIRE(r);
  auto j = nlohmann::json::parse(r->body, nullptr, false);
  REQUIRE_MESSAGE(!j.is_discarded(), "not JSON: " << r->body);
  return j;
}

// Chromium on this host, or "" (then the browser checks are skipped, saying why).
inline std::string chromium() {
  for (const char* path : {"/usr/bin/chromium", "/usr/bin/chromium-browser"}) {
    if (::access(path, X_OK) == 0) return path;
  }
  return "";
}

// True when Chromium is here; otherwise says the test is skipped, and why.
inline bool have_chromium() {
  if (!chromium().empty()) return true;
  MESSAGE("skipped: chromium is not installed (apt package chromium)");
  return false;
}

// Headless Chromium's rendering of `url`: the DOM after scripts ran
// (--dump-dom), or a screenshot into `screenshot`. Offline: loopback only.
inline RunResult browse(const std::string& url, const std::string& screenshot = "") {
  TempDir profile;
  std::vector<std::string> args = {"--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
                                   "--disable-background-networking", "--disable-component-update", "--disable-sync",
                                   "--user-data-dir=" + profile.path()};
  if (screenshot.empty()) {
    args.push_back("--dump-dom");
  } else {
    args.insert(args.end(), {"--screenshot=" + screenshot, "--window-size=1200,900", "--hide-scrollbars"});
  }
  args.push_back(url);
  return run_command(chromium(), args, "", {{"HOME", profile.path()}}, {}, 120);
}

// Headless Chromium driven over the DevTools protocol on a pipe
// (--remote-debugging-pipe: it reads commands on fd 3 and writes answers
// and events on fd 4, each a JSON text ended by a NUL byte): pages that run
// their script and take clicks, as an operator's browser does.
class Browser {
 public:
  Browser() {
    int to[2], from[2];
    REQUIRE(::pipe2(to, O_CLOEXEC) == 0);
    REQUIRE(::pipe2(from, O_CLOEXEC) == 0);
    const std::vector<std::string> args = {"--headless", "--no-sandbox", "--disable-gpu", "--disable-quic",
                                           "--no-first-run", "--disable-background-networking",
                                           "--disable-component-update", "--disable-sync",
                                           "--user-data-dir=" + profile_.path(), "--remote-debugging-pipe",
                                           "about:blank"};
    // In the child: out of the way of 3 and 4 first, then into them.
    auto onto_3_and_4 = [&] {
      const int in = ::fcntl(to[0], F_DUPFD_CLOEXEC, 10);
      const int out = ::fcntl(from[1], F_DUPFD_CLOEXEC, 10);
      if (in < 0 || out < 0 || ::dup2(in, 3) < 0 || ::dup2(out, 4) < 0) _exit(127);
    };
    process_ = std::make_unique<e2e::Background>(chromium(), args,
                                                 std::map<std::string, std::string>{{"HOME", profile_.path()}},
                                                 onto_3_and_4);
    ::close(to[0]);
    ::close(from[1]);
    to_ = to[1];
    from_ = from[0];
  }
  ~Browser() {
    process_.reset();  // SIGKILL and reap, then its pipes
    ::close(to_);
    ::close(from_);
  }
  Browser(const Browser&) = delete;
  Browser& operator=(const Browser&) = delete;

  // Sends `method` and returns its answer's "result" (fails the test on an "error").
  nlohmann::json call(const std::string& method, const nlohmann::json& params = nlohmann::json::object(),
                      const std::string& session = "") {
    nlohmann::json message = {{"id", ++last_id_}, {"method", method}, {"params", params}};
    if (!session.empty()) message["sessionId"] = session;
    const std::string text = message.dump() + std::string(1, '\0');
    REQUIRE(::write(to_, text.data(), text.size()) == static_cast<ssize_t>(text.size()));
    while (true) {
      const nlohmann::json m = next();
      if (m.contains("id") && m["id"] == last_id_) {
        REQUIRE_MESSAGE(!m.contains("error"), method << ": " << m.dump());
        return m["result"];
      }
      events_.push_back(m);
    }
  }
  // Waits for the event `method` of `session` (one that came already counts).
  void wait_for(const std::string& method, const std::string& session) {
    auto matches = [&](const nlohmann::json& m) { return m.value("method", "") == method && m.value("sessionId", "") == session; };
    for (auto it = events_.begin(); it != events_.end(); ++it) {
      if (matches(*it)) {
        events_.erase(it);
        return;
      }
    }
    while (true) {
      const nlohmann::json m = next();
      if (matches(m)) return;
      events_.push_back(m);
    }
  }
  // `url` in a new tab: its session, once the page has loaded.
  std::string open(const std::string& url) {
    const std::string target = call("Target.createTarget", {{"url", "about:blank"}})["targetId"];
    const std::string session = call("Target.attachToTarget", {{"targetId", target}, {"flatten", true}})["sessionId"];
    call("Page.enable", nlohmann::json::object(), session);
    call("Page.navigate", {{"url", url}}, session);
    wait_for("Page.loadEventFired", session);
    return session;
  }
  // The whole page of `session` as a PNG, 1200 CSS pixels wide.
  std::string screenshot(const std::string& session) {
    call("Emulation.setDeviceMetricsOverride",
         {{"width", 1200}, {"height", 900}, {"deviceScaleFactor", 1}, {"mobile", false}}, session);
    const nlohmann::json shot =
        call("Page.captureScreenshot", {{"format", "png"}, {"captureBeyondViewport", true}}, session);
    auto png = pillbox::base64_decode(shot.value("data", ""));
    REQUIRE(png.has_value());
    return *png;
  }
  // PILLBOX_CONSOLE_SCREENSHOTS=DIR: the page of `session` into DIR/NAME,
  // for docs/console.md; nothing otherwise.
  void screenshot_for_docs(const std::string& session, const std::string& name) {
    const char* dir = std::getenv("PILLBOX_CONSOLE_SCREENSHOTS");
    if (dir == nullptr) return;
    const std::string png = screenshot(session);
    std::FILE* f = std::fopen((std::string(dir) + "/" + name).c_str(), "wb");
    REQUIRE(f != nullptr);
    CHECK(std::fwrite(png.data(), 1, png.size(), f) == png.size());
    std::fclose(f);
  }
  // The value of a JavaScript expression in the page (a promise is awaited).
  nlohmann::json evaluate(const std::string& session, const std::string& expression) {
    const nlohmann::json r = call("Runtime.evaluate", {{"expression", expression}, {"awaitPromise", true}, {"returnByValue", true}},
                        session);
    return r.contains("result") && r["result"].contains("value") ? r["result"]["value"] : nlohmann::json(nullptr);
  }

 private:
  // The next message, read in blocks (buffer_ keeps what follows it).
  nlohmann::json next() {
    std::size_t end;
    while ((end = buffer_.find('\0')) == std::string::npos) {
      pollfd p{from_, POLLIN, 0};
      if (::poll(&p, 1, 60'000) != 1) FAIL("chromium said nothing for 60 s");
      char block[65536];
      const ssize_t n = ::read(from_, block, sizeof block);
      if (n <= 0) FAIL("chromium closed its DevTools pipe");
      buffer_.append(block, static_cast<std::size_t>(n));
    }
    auto j = nlohmann::json::parse(buffer_.substr(0, end), nullptr, false);
    buffer_.erase(0, end + 1);
    REQUIRE(!j.is_discarded());
    return j;
  }

  e2e::TempDir profile_;
  std::unique_ptr<e2e::Background> process_;
  int to_ = -1;
  int from_ = -1;
  int last_id_ = 0;
  std::vector<nlohmann::json> events_;  // read while waiting for something else
  std::string buffer_;
};

}  // namespace e2e
