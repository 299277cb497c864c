// The --metrics address and server (supervisor/metrics/metrics_server.h):
// real sockets on loopback. What the server answers over HTTP is checked
// end to end in tests/e2e/metrics_test.cpp.
#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <doctest/doctest.h>

#include <string>

#include "supervisor/metrics/live_metrics.h"
#include "supervisor/metrics/metrics_server.h"
#include "supervisor/store/store.h"
#include "tests/unit/scratch_dir.h"

using namespace pillbox;
using namespace pillbox::metrics;

namespace {

// Whether something accepts TCP connections on 127.0.0.1:port.
bool listening(int port) {
  const int fd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  REQUIRE(fd >= 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_port = htons(static_cast<std::uint16_t>(port));
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  const bool ok = ::connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof addr) == 0;
  ::close(fd);
  return ok;
}

}  // namespace

TEST_CASE("metrics address: HOST:PORT, [IPV6]:PORT, or PORT alone on loopback; anything else is a usage error") {
  auto a = parse_listen_address("127.0.0.1:9464");
  REQUIRE(a.has_value());
  CHECK(a->host == "127.0.0.1");
  CHECK(a->port == 9464);
  a = parse_listen_address("9464");
  REQUIRE(a.has_value());
  CHECK(a->host == "127.0.0.1");
  a = parse_listen_address("[::1]:0");
  REQUIRE(a.has_value());
  CHECK(a->host == "::1");
  CHECK(a->port == 0);
  a = parse_listen_address("0.0.0.0:80");
  REQUIRE(a.has_value());
  CHECK(a->host == "0.0.0.0");
  for (const char* bad : {"", ":9464", "127.0.0.1:", "127.0.0.1:65536", "127.0.0.1:-1", "host:http", "9464x", "[]:1"}) {
    INFO(bad);
    auto r = parse_listen_address(bad);
    REQUIRE_FALSE(r.has_value());
    CHECK(r.error_code() == ErrorCode::kUsage);
    CHECK(r.error().find("--metrics") != std::string::npos);
  }
}

TEST_CASE("metrics server: port 0 picks a free port; the same port twice is a usage error; it stops when it goes") {
  auto first = MetricsServer::start({"127.0.0.1", 0}, [] { return std::string("x 1\n"); });
  REQUIRE_MESSAGE(first.has_value(), first.error());
  const int port = (*first)->port();
  CHECK(port > 0);
  CHECK((*first)->url() == "http://127.0.0.1:" + std::to_string(port) + "/metrics");
  CHECK(listening(port));
  auto second = MetricsServer::start({"127.0.0.1", port}, [] { return std::string(); });
  REQUIRE_FALSE(second.has_value());
  CHECK(second.error_code() == ErrorCode::kUsage);
  CHECK(second.error().find("cannot listen on 127.0.0.1:" + std::to_string(port)) != std::string::npos);
  first->reset();
  CHECK_FALSE(listening(port));
}

TEST_CASE("metrics server: stopped right after it started, it stops (no wait on its accept loop)") {
  for (int i = 0; i < 20; ++i) {
    auto s = MetricsServer::start({"127.0.0.1", 0}, [] { return std::string(); });
    REQUIRE_MESSAGE(s.has_value(), s.error());
  }
}

TEST_CASE("live metrics: without a store no store part; with one not yet created, pillbox_store_up 0, then 1") {
  LiveMetrics bare(std::nullopt);
  CHECK(bare.render().find("pillbox_store_up") == std::string::npos);

  pillbox::test::ScratchDir scratch("live-metrics");
  const std::string dir = scratch.path + "/store";
  LiveMetrics live(dir);
  const std::string before = live.render();
  CHECK(before.find("\npillbox_store_up 0\n") != std::string::npos);
  CHECK(before.find("pillbox_quarantine_records") == std::string::npos);
  CHECK(::access((dir + "/pillbox.db").c_str(), F_OK) != 0);  // a scrape creates nothing
  {
    auto opened = store::Store::open(dir);
    REQUIRE_MESSAGE(opened.has_value(), opened.error());
  }
  const std::string after = live.render();
  INFO(after);
  CHECK(after.find("\npillbox_store_up 1\n") != std::string::npos);
  CHECK(after.find("\npillbox_store_tasks{state=\"ok\"} 0\n") != std::string::npos);
}

TEST_CASE("live metrics: once stopped, the store is read no more (pillbox_store_up 0), the run's counters still are") {
  pillbox::test::ScratchDir scratch("live-metrics-stop");
  const std::string dir = scratch.path + "/store";
  {
    auto opened = store::Store::open(dir);
    REQUIRE_MESSAGE(opened.has_value(), opened.error());
  }
  LiveMetrics live(dir);
  live.run().set_slots(3);
  CHECK(live.render().find("\npillbox_store_up 1\n") != std::string::npos);
  live.stop();
  // Within the reuse window of the last read too: nothing of the store is served.
  const std::string after = live.render();
  INFO(after);
  CHECK(after.find("\npillbox_store_up 0\n") != std::string::npos);
  CHECK(after.find("pillbox_store_tasks") == std::string::npos);
  CHECK(after.find("\npillbox_slots 3\n") != std::string::npos);
}
