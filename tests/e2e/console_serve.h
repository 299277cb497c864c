#pragma once
// What the console's e2e tests over a store share: a store with crashes of
// one bug and another (its payloads hostile to a browser), its token, and
// HTTP on a raw socket. `pillbox serve` itself and Chromium are
// console_client.h's.
#include <arpa/inet.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <chrono>
#include <cstdlib>
#include <doctest/doctest.h>
#include <httplib.h>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "tests/e2e/background.h"
#include "tests/e2e/console_client.h"
#include "tests/e2e/support.h"

namespace e2e::console {

using nlohmann::json;

// The payload a browser must never run: markup, then bytes that are not UTF-8.
// It starts with 'S': poison_corpus crashes on it (corrupt_record).
inline const std::string kHostilePayload = std::string("S<script>alert(1)</script>") + "\xff\xfe\x80 end";
inline const std::string kHostileKey = "<img src=x onerror=alert(2)>";
// The same markup in a payload that is printable UTF-8: previewed as text.
inline const std::string kMarkupPayload = "S<script>alert(1)</script> as text";

using e2e::Serve;  // console_client.h

// A store with five tasks: three crashes of one bug ('S': one plain, the
// hostile payload under a hostile key, the markup as text), an abort ('A'),
// and one ok.
struct ConsoleStore {
  e2e::TempDir dir;
  e2e::TempDir work{01777};  // poison_corpus's marker directory
  std::string store = dir.path() + "/store";
  std::string db = store + "/pillbox.db";

  ConsoleStore() {
    const std::string input = e2e::task_line("segv", "S plain crash") + e2e::task_line(kHostileKey, kHostilePayload) +
                              e2e::task_line("markup", kMarkupPayload) + e2e::task_line("abort", "A checksum") +
                              e2e::task_line("fine", "just text");
    const auto run = e2e::run_pillbox({"run", "--store", store, "--json", "-", "--", e2e::fixture("poison_corpus"),
                                  work.path()},
                                 input);
    INFO(run.describe());
    REQUIRE(run.exit_code == 1);
    REQUIRE(e2e::sql_int(db, "SELECT count(*) FROM quarantine") == 4);
  }
  // The record id of task `key`.
  std::string id_of(const std::string& key) const {
    const auto rows = e2e::sql_rows(db, "SELECT q.id FROM quarantine q WHERE q.key = '" + key + "'");
    REQUIRE(rows.size() == 1);
    return rows[0][0];
  }
  // The CLI's --json lines as a JSON array.
  json cli(const std::vector<std::string>& args) const {
    std::vector<std::string> all = args;
    all.insert(all.end(), {"--store", store, "--json"});
    const auto r = e2e::run_pillbox(all);
    INFO(r.describe());
    REQUIRE(r.exit_code == 0);
    return json(r.records);
  }
  // What a discard must not change: statuses and audit trails, as text.
  std::string state() const {
    std::string out;
    for (const auto& row : e2e::sql_rows(db, "SELECT id, status, updated_at FROM quarantine ORDER BY id")) {
      for (const auto& cell : row) out += cell + "|";
    }
    out += std::to_string(e2e::sql_int(db, "SELECT count(*) FROM audit"));
    return out;
  }
};

using e2e::body_of;

inline std::string read_token(const std::string& store) {
  std::string t = e2e::read_file(store + "/serve.token");
  while (!t.empty() && t.back() == '\n') t.pop_back();
  return t;
}

// A raw connection to the console: what a browser's or an attacker's
// bytes look like on the wire, sent in the pieces the test chooses.
class RawConnection {
 public:
  explicit RawConnection(int port) : fd_(::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0)) {
    REQUIRE(fd_ >= 0);
    sockaddr_in to{};
    to.sin_family = AF_INET;
    to.sin_port = htons(static_cast<std::uint16_t>(port));
    to.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    REQUIRE(::connect(fd_, reinterpret_cast<sockaddr*>(&to), sizeof to) == 0);
  }
  ~RawConnection() { ::close(fd_); }
  RawConnection(const RawConnection&) = delete;
  RawConnection& operator=(const RawConnection&) = delete;

  // False when the console has closed the connection (EPIPE, ECONNRESET).
  bool send(const std::string& bytes) {
    std::size_t sent = 0;
    while (sent < bytes.size()) {
      const ssize_t n = ::send(fd_, bytes.data() + sent, bytes.size() - sent, MSG_NOSIGNAL);
      if (n <= 0) return false;
      sent += static_cast<std::size_t>(n);
    }
    return true;
  }
  // What arrives until the console closes the connection (or resets it),
  // or `limit` passes; closed() says which.
  std::string read_until_closed(std::chrono::milliseconds limit) {
    std::string answer;
    const auto end = std::chrono::steady_clock::now() + limit;
    char block[4096];
    closed_ = false;
    while (true) {
      const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(end - std::chrono::steady_clock::now());
      pollfd p{fd_, POLLIN, 0};
      if (left.count() <= 0 || ::poll(&p, 1, static_cast<int>(left.count())) != 1) return answer;
      const ssize_t n = ::recv(fd_, block, sizeof block, 0);
      if (n <= 0) {
        closed_ = true;
        return answer;
      }
      answer.append(block, static_cast<std::size_t>(n));
    }
  }
  bool closed() const { return closed_; }

 private:
  int fd_;
  bool closed_ = false;
};

inline std::size_t count_of(const std::string& text, const std::string& what) {
  std::size_t n = 0;
  for (auto at = text.find(what); at != std::string::npos; at = text.find(what, at + what.size())) ++n;
  return n;
}

// Everything the console answers on one connection after `request` was
// sent, until it closes it (its keep-alive ends, or it refused the request
// and closed it: then what was not sent is dropped) or 30 s pass.
inline std::string raw_exchange(int port, const std::string& request) {
  RawConnection connection(port);
  connection.send(request);
  return connection.read_until_closed(std::chrono::seconds(30));
}

}  // namespace e2e::console
