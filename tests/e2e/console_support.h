#pragma once
// What the console's end-to-end tests share (console_test.cpp,
// console_jobs_test.cpp): `pillbox serve` in the background, a store with
// crash records of one bug, JSON bodies, the access token, and headless
// Chromium.
#include <doctest/doctest.h>
#include <unistd.h>

#include <cstdlib>
#include <httplib.h>
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

}  // namespace console_test
