// The worker's protocol steps (supervisor/broker/stream_protocol.h) called
// directly against a real redis-server: the fence (only the consumer that
// holds an entry settles, records, renews or redelivers it), the delivery
// count as the attempt count, the history that travels with a claim, and
// the settle's all-or-nothing.
#include <doctest/doctest.h>

#include <string>

#include "supervisor/broker/stream_protocol.h"
#include "tests/e2e/redis_server.h"

namespace {

using namespace pillbox::broker;

const StreamKeys kKeys = stream_keys("jobs");
const Consumer kA{"pillbox", "worker-a"};
const Consumer kB{"pillbox", "worker-b"};

std::string add(pillbox::broker::RedisConnection& redis, const std::string& payload) {
  auto r = redis.command({"XADD", "jobs", "*", "key", "k", "payload", payload});
  REQUIRE(r.has_value());
  return reply_text(r->get());
}

TEST_CASE("protocol: only the consumer that holds an entry can settle, record, renew or redeliver it") {
  e2e::RedisServer server;
  REQUIRE_REDIS(server);
  auto redis = e2e::connect(server);
  REQUIRE(create_group(redis, kKeys, "pillbox").is_ok());
  const std::string id = add(redis, "p");
  auto read = read_new(redis, kKeys, kA, 10, std::chrono::milliseconds(0));
  REQUIRE(read.has_value());
  REQUIRE(read->size() == 1);
  CHECK((*read)[0].count == 1);

  // B is not the owner: every step refuses and writes nothing.
  auto s = settle(redis, kKeys, kB, id, kKeys.results, 0, {{"key", "k"}});
  REQUIRE(s.has_value());
  CHECK_FALSE(s->has_value());
  auto r = record_delivery(redis, kKeys, kB, id, 1, "{}");
  REQUIRE(r.has_value());
  CHECK_FALSE(r->held);
  auto lost = renew(redis, kKeys, kB, {id});
  REQUIRE(lost.has_value());
  CHECK(*lost == std::vector<std::string>{id});
  auto again = redeliver(redis, kKeys, kB, id);
  REQUIRE(again.has_value());
  CHECK_FALSE(again->has_value());
  CHECK(e2e::redis_integer(server, {"XLEN", "jobs:results"}) == 0);
  CHECK(e2e::redis_integer(server, {"EXISTS", "jobs:attempts:" + id}) == 0);

  // A records, delivers again (the count rises), and the history comes back.
  r = record_delivery(redis, kKeys, kA, id, 1, R"({"kind":"crash"})");
  REQUIRE(r.has_value());
  CHECK(r->held);
  again = redeliver(redis, kKeys, kA, id);
  REQUIRE(again.has_value());
  REQUIRE(again->has_value());
  CHECK((*again)->count == 2);
  CHECK((*again)->history.at(1) == R"({"kind":"crash"})");
  lost = renew(redis, kKeys, kA, {id});
  REQUIRE(lost.has_value());
  CHECK(lost->empty());

  // A settles: result added, entry acked and deleted, history gone, in one step.
  s = settle(redis, kKeys, kA, id, kKeys.results, 0, {{"key", "k"}, {"verdict", "ok"}});
  REQUIRE(s.has_value());
  REQUIRE(s->has_value());
  CHECK_FALSE((*s)->empty());
  CHECK(e2e::redis_integer(server, {"XLEN", "jobs:results"}) == 1);
  CHECK(e2e::redis_integer(server, {"XLEN", "jobs"}) == 0);
  CHECK(e2e::pending_count(server, "jobs", "pillbox") == 0);
  CHECK(e2e::redis_integer(server, {"EXISTS", "jobs:attempts:" + id}) == 0);
  // Settling twice (a retried command whose first reply was lost) does nothing more.
  s = settle(redis, kKeys, kA, id, kKeys.results, 0, {{"key", "k"}});
  REQUIRE(s.has_value());
  CHECK_FALSE(s->has_value());
  CHECK(e2e::redis_integer(server, {"XLEN", "jobs:results"}) == 1);
}

TEST_CASE("protocol: a claim takes only idle entries, raises their count and brings their history") {
  e2e::RedisServer server;
  REQUIRE_REDIS(server);
  auto redis = e2e::connect(server);
  REQUIRE(create_group(redis, kKeys, "pillbox").is_ok());
  const std::string id = add(redis, "p");
  REQUIRE(read_new(redis, kKeys, kA, 10, std::chrono::milliseconds(0)).has_value());
  REQUIRE(record_delivery(redis, kKeys, kA, id, 1, "one").value().held);
  // Not idle long enough: nothing.
  auto c = claim_idle(redis, kKeys, kB, std::chrono::hours(1), "0-0", 10);
  REQUIRE(c.has_value());
  CHECK(c->deliveries.empty());
  // Idle for at least 0 ms: B takes it, at delivery 2, with A's record.
  c = claim_idle(redis, kKeys, kB, std::chrono::milliseconds(0), "0-0", 10);
  REQUIRE(c.has_value());
  REQUIRE(c->deliveries.size() == 1);
  const Delivery& d = c->deliveries[0];
  CHECK(d.entry == id);
  CHECK(d.count == 2);
  CHECK(d.history.at(1) == "one");
  bool has_payload = false;
  for (const auto& [k, v] : d.fields) has_payload = has_payload || (k == "payload" && v == "p");
  CHECK(has_payload);
  // A has lost it: its settle is fenced out.
  auto s = settle(redis, kKeys, kA, id, kKeys.dlq, 0, {{"key", "k"}});
  REQUIRE(s.has_value());
  CHECK_FALSE(s->has_value());
  CHECK(e2e::redis_integer(server, {"XLEN", "jobs:dlq"}) == 0);
}

TEST_CASE("protocol: an entry deleted while pending is dropped by the claim, not delivered empty") {
  e2e::RedisServer server;
  REQUIRE_REDIS(server);
  auto redis = e2e::connect(server);
  REQUIRE(create_group(redis, kKeys, "pillbox").is_ok());
  const std::string id = add(redis, "p");
  REQUIRE(read_new(redis, kKeys, kA, 10, std::chrono::milliseconds(0)).has_value());
  REQUIRE(redis.command({"XDEL", "jobs", id}).has_value());
  auto c = claim_idle(redis, kKeys, kB, std::chrono::milliseconds(0), "0-0", 10);
  REQUIRE(c.has_value());
  CHECK(c->deliveries.empty());
  CHECK(e2e::pending_count(server, "jobs", "pillbox") == 0);
  auto again = redeliver(redis, kKeys, kA, id);
  REQUIRE(again.has_value());
  CHECK_FALSE(again->has_value());
}

TEST_CASE("protocol: the results stream is capped at about --results-maxlen") {
  e2e::RedisServer server;
  REQUIRE_REDIS(server);
  auto redis = e2e::connect(server);
  REQUIRE(create_group(redis, kKeys, "pillbox").is_ok());
  for (int i = 0; i < 300; ++i) add(redis, "p" + std::to_string(i));
  auto read = read_new(redis, kKeys, kA, 1000, std::chrono::milliseconds(0));
  REQUIRE(read.has_value());
  REQUIRE(read->size() == 300);
  for (const auto& d : *read) {
    auto s = settle(redis, kKeys, kA, d.entry, kKeys.results, 100, {{"key", "k"}});
    REQUIRE(s.has_value());
    REQUIRE(s->has_value());
  }
  // MAXLEN ~ trims whole macro nodes: about 100, never all 300.
  const long long kept = e2e::redis_integer(server, {"XLEN", "jobs:results"});
  CHECK(kept >= 100);
  CHECK(kept < 300);
}

TEST_CASE("protocol: a key that is not a stream is refused by name") {
  e2e::RedisServer server;
  REQUIRE_REDIS(server);
  auto redis = e2e::connect(server);
  REQUIRE(redis.command({"LPUSH", "jobs", "x"}).has_value());
  const auto s = create_group(redis, kKeys, "pillbox");
  CHECK_FALSE(s.is_ok());
  CHECK(s.message().find("the key 'jobs'") != std::string::npos);
  CHECK(s.message().find("holds a list, not a stream") != std::string::npos);
}

}  // namespace
