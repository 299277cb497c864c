#pragma once
// What the console's end-to-end tests (console_test.cpp over a store,
// console_fleet_test.cpp over the fleet's quarantine) drive `pillbox serve`
// with: the process in the background, its JSON answers, and headless
// Chromium's rendering of its pages.
#include <doctest/doctest.h>
#include <unistd.h>

#include <cstdlib>
#include <httplib.h>
#include <map>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

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
  bool running() { return !process_.ended(); }
  pid_t pid() const { return process_.pid(); }
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

}  // namespace e2e
