#pragma once
// Reading a live pillbox's /metrics in the end-to-end tests (metrics_test.cpp,
// kafka_lag_test.cpp): its port from what it said on stderr, a scrape over
// real HTTP (cpp-httplib's client: the test links PkgConfig::HTTPLIB), and
// one sample's value out of the text.
#include <httplib.h>

#include <regex>
#include <string>

#include "tests/e2e/live_run.h"

namespace e2e {

// The value of the sample written exactly as `series` (name and labels), or -1.
inline double sample(const std::string& text, const std::string& series) {
  const std::string start = series + " ";
  std::size_t at = 0;
  while ((at = text.find(start, at)) != std::string::npos) {
    if (at == 0 || text[at - 1] == '\n') {
      const std::size_t end = text.find('\n', at);
      return std::stod(text.substr(at + start.size(), end - at - start.size()));
    }
    at += start.size();
  }
  return -1;
}

struct Scrape {
  int status = 0;
  std::string content_type;
  std::string body;
};

inline Scrape scrape(int port, const std::string& path = "/metrics") {
  httplib::Client client("127.0.0.1", port);
  client.set_connection_timeout(10, 0);
  client.set_read_timeout(30, 0);
  auto res = client.Get(path.c_str());
  if (!res) return {};
  return {res->status, res->get_header_value("Content-Type"), res->body};
}

// The port of "pillbox run: metrics at http://127.0.0.1:PORT/metrics" (or
// "pillbox worker: ..."), read from stderr (printed before anything runs); 0
// when absent.
inline int metrics_port(LiveRun& run) {
  static const std::regex url("pillbox (run|worker): metrics at http://127\\.0\\.0\\.1:([0-9]+)/metrics");
  while (auto line = run.err_line()) {
    std::smatch m;
    if (std::regex_match(*line, m, url)) return std::stoi(m[2]);
  }
  return 0;
}

}  // namespace e2e
