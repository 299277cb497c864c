#pragma once
// What the console's end-to-end tests share (console_test.cpp,
// console_jobs_test.cpp): `pillbox serve` in the background, a store with
// crash records of one bug, JSON bodies, the access token, and headless
// Chromium.
#include <doctest/doctest.h>
#include <fcntl.h>
#include <poll.h>
#include <unistd.h>

#include <cstdlib>
#include <httplib.h>
#include <map>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "tests/e2e/background.h"
#include "tests/e2e/support.h"

namespace console_test {

using e2e::run_pillbox;
using e2e::sql_int;
using e2e::sql_rows;
using e2e::task_line;
using nlohmann::json;

// The payload a browser must never run: markup, then bytes that are not UTF-8.
// It starts with 'S': poison_corpus crashes on it (corrupt_record).
inline const std::string kHostilePayload = std::string("S<script>alert(1)</script>") + "\xff\xfe\x80 end";
inline const std::string kHostileKey = "<img src=x onerror=alert(2)>";
// The same markup in a payload that is printable UTF-8: previewed as text.
inline const std::string kMarkupPayload = "S<script>alert(1)</script> as text";

// `pillbox serve` running in the background (e2e::Background); the
// constructor waits for its first line of stdout (the URL) or its end.
class Serve {
 public:
  Serve(const std::string& store, const std::string& listen = "127.0.0.1:0")
      : process_(e2e::pillbox_binary(), {"serve", "--store", store, "--listen", listen}) {
    // The first line, or what it printed when it exits before printing one.
    std::string out;
    const bool done = e2e::eventually([&] {
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
  // Sends `sig` and waits for the exit; its exit code (128 + signal when killed).
  int stop(int sig) {
    process_.signal(sig);
    return wait();
  }
  int wait() { return process_.wait(); }

 private:
  e2e::Background process_;
  std::string url_;
};

// A store with five tasks: three crashes of one bug ('S': one plain, the
// hostile payload under a hostile key, the markup as text), an abort ('A'),
// and one ok.
struct ConsoleStore {
  e2e::TempDir dir;
  e2e::TempDir work{01777};  // poison_corpus's marker directory
  std::string store = dir.path() + "/store";
  std::string db = store + "/pillbox.db";

  ConsoleStore() {
    const std::string input = task_line("segv", "S plain crash") + task_line(kHostileKey, kHostilePayload) +
                              task_line("markup", kMarkupPayload) + task_line("abort", "A checksum") + task_line("fine", "just text");
    const auto run = run_pillbox({"run", "--store", store, "--json", "-", "--", e2e::fixture("poison_corpus"),
                                  work.path()},
                                 input);
    INFO(run.describe());
    REQUIRE(run.exit_code == 1);
    REQUIRE(sql_int(db, "SELECT count(*) FROM quarantine") == 4);
  }
  // The record id of task `key`.
  std::string id_of(const std::string& key) const {
    const auto rows = sql_rows(db, "SELECT q.id FROM quarantine q WHERE q.key = '" + key + "'");
    REQUIRE(rows.size() == 1);
    return rows[0][0];
  }
  // The CLI's --json lines as a JSON array.
  json cli(const std::vector<std::string>& args) const {
    std::vector<std::string> all = args;
    all.insert(all.end(), {"--store", store, "--json"});
    const auto r = run_pillbox(all);
    INFO(r.describe());
    REQUIRE(r.exit_code == 0);
    return json(r.records);
  }
  // What a discard must not change: statuses and audit trails, as text.
  std::string state() const {
    std::string out;
    for (const auto& row : sql_rows(db, "SELECT id, status, updated_at FROM quarantine ORDER BY id")) {
      for (const auto& cell : row) out += cell + "|";
    }
    out += std::to_string(sql_int(db, "SELECT count(*) FROM audit"));
    return out;
  }
};

inline json body_of(const httplib::Result& r) {
  REQUIRE(r);
  auto j = json::parse(r->body, nullptr, false);
  REQUIRE_MESSAGE(!j.is_discarded(), "not JSON: " << r->body);
  return j;
}

inline std::string read_token(const std::string& store) {
  std::string t = e2e::read_file(store + "/serve.token");
  while (!t.empty() && t.back() == '\n') t.pop_back();
  return t;
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
inline e2e::RunResult browse(const std::string& url, const std::string& screenshot = "") {
  e2e::TempDir profile;
  std::vector<std::string> args = {"--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
                                   "--disable-background-networking", "--disable-component-update", "--disable-sync",
                                   "--user-data-dir=" + profile.path()};
  if (screenshot.empty()) {
    args.push_back("--dump-dom");
  } else {
    args.insert(args.end(), {"--screenshot=" + screenshot, "--window-size=1200,900", "--hide-scrollbars"});
  }
  args.push_back(url);
  return e2e::run_command(chromium(), args, "", {{"HOME", profile.path()}}, {}, 120);
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
  json call(const std::string& method, const json& params = json::object(), const std::string& session = "") {
    json message = {{"id", ++last_id_}, {"method", method}, {"params", params}};
    if (!session.empty()) message["sessionId"] = session;
    const std::string text = message.dump() + std::string(1, '\0');
    REQUIRE(::write(to_, text.data(), text.size()) == static_cast<ssize_t>(text.size()));
    while (true) {
      const json m = next();
      if (m.contains("id") && m["id"] == last_id_) {
        REQUIRE_MESSAGE(!m.contains("error"), method << ": " << m.dump());
        return m["result"];
      }
      events_.push_back(m);
    }
  }
  // Waits for the event `method` of `session` (one that came already counts).
  void wait_for(const std::string& method, const std::string& session) {
    auto matches = [&](const json& m) { return m.value("method", "") == method && m.value("sessionId", "") == session; };
    for (auto it = events_.begin(); it != events_.end(); ++it) {
      if (matches(*it)) {
        events_.erase(it);
        return;
      }
    }
    while (true) {
      const json m = next();
      if (matches(m)) return;
      events_.push_back(m);
    }
  }
  // `url` in a new tab: its session, once the page has loaded.
  std::string open(const std::string& url) {
    const std::string target = call("Target.createTarget", {{"url", "about:blank"}})["targetId"];
    const std::string session = call("Target.attachToTarget", {{"targetId", target}, {"flatten", true}})["sessionId"];
    call("Page.enable", json::object(), session);
    call("Page.navigate", {{"url", url}}, session);
    wait_for("Page.loadEventFired", session);
    return session;
  }
  // The value of a JavaScript expression in the page (a promise is awaited).
  json evaluate(const std::string& session, const std::string& expression) {
    const json r = call("Runtime.evaluate", {{"expression", expression}, {"awaitPromise", true}, {"returnByValue", true}},
                        session);
    return r.contains("result") && r["result"].contains("value") ? r["result"]["value"] : json(nullptr);
  }

 private:
  // The next message, read in blocks (buffer_ keeps what follows it).
  json next() {
    std::size_t end;
    while ((end = buffer_.find('\0')) == std::string::npos) {
      pollfd p{from_, POLLIN, 0};
      if (::poll(&p, 1, 60'000) != 1) FAIL("chromium said nothing for 60 s");
      char block[65536];
      const ssize_t n = ::read(from_, block, sizeof block);
      if (n <= 0) FAIL("chromium closed its DevTools pipe");
      buffer_.append(block, static_cast<std::size_t>(n));
    }
    auto j = json::parse(buffer_.substr(0, end), nullptr, false);
    buffer_.erase(0, end + 1);
    REQUIRE(!j.is_discarded());
    return j;
  }

  e2e::TempDir profile_;
  std::unique_ptr<e2e::Background> process_;
  int to_ = -1;
  int from_ = -1;
  int last_id_ = 0;
  std::vector<json> events_;  // read while waiting for something else
  std::string buffer_;
};

}  // namespace console_test
