// pillbox submit --amqp against a real rabbitmq-server the test starts
// itself (rabbit_server.h; one broker for every case here, since a node
// takes seconds to start: one test case, a function per case): each task is one confirmed, persistent message
// with the payload's exact bytes, its key in the header `key` and a unique
// message_id; a queue that is missing is declared as the workers want it,
// one that exists is left alone; what the broker refuses (a full queue's
// nack) or does not answer (a memory alarm blocks publishers) ends submit
// with exit 3 and a sentence that says why and how many went in.
#include <doctest/doctest.h>
#include <sys/stat.h>

#include <nlohmann/json.hpp>
#include <set>
#include <string>
#include <vector>

#include "supervisor/broker/amqp_connection.h"
#include "supervisor/broker/amqp_topology.h"
#include "tests/e2e/amqp_client.h"
#include "tests/e2e/rabbit_server.h"
#include "tests/e2e/support.h"

using json = nlohmann::json;
using pillbox::broker::AmqpConnection;
using pillbox::broker::AmqpMessage;
using e2e::run_pillbox;

using e2e::drain;
namespace {

// The broker's word on a queue: type and arguments, from rabbitmqctl.
json queue_info(const e2e::RabbitServer& server, const std::string& name) {
  const auto r = server.ctl({"list_queues", "name", "type", "durable", "messages", "--formatter", "json", "--quiet"});
  REQUIRE_MESSAGE(r.exit_code == 0, r.err);
  for (const json& q : json::parse(r.out)) {
    if (q.at("name") == name) return q;
  }
  return json();
}

// Files, a directory and JSON lines become one confirmed message each, exact bytes.
void exact_bytes(e2e::RabbitServer& server) {
  e2e::TempDir in;
  const std::string binary("\x00\xff\x01 not utf-8 \x80", 15);
  const std::string one = in.write("one.bin", binary);
  ::mkdir((in.path() + "/dir").c_str(), 0755);
  in.write("dir/a", "first in the directory");
  in.write("dir/b", "");
  const std::string odd_key = "k\tkey \xc3\xa9\n";  // a tab, UTF-8, a newline
  const std::string lines = e2e::task_line(odd_key, "line payload");
  const auto r = run_pillbox({"submit", "--amqp", server.url(), "--queue", "jobs", one, in.path() + "/dir", "-"},
                             lines);
  INFO(r.describe());
  CHECK(r.exit_code == 0);
  // Missing, so declared: a durable quorum queue, with its dead-letter side.
  CHECK(r.err.find("declared queue jobs on amqp://pillbox@127.0.0.1:" + std::to_string(server.port()) + "/%2f") !=
        std::string::npos);
  CHECK(r.err.find("4 tasks added to queue jobs") != std::string::npos);
  CHECK(r.err.find("pillbox-test") == std::string::npos);  // never the password
  const json q = queue_info(server, "jobs");
  CHECK(q.value("type", "") == "quorum");
  CHECK(q.value("durable", false));
  CHECK_FALSE(queue_info(server, "jobs.dlq").is_null());

  auto c = e2e::amqp_connect(server);
  const auto got = drain(c, "jobs");
  REQUIRE(got.size() == 4);
  CHECK(got[0].body == binary);
  CHECK(got[0].key == one);
  CHECK(got[1].body == "first in the directory");
  CHECK(got[1].key == in.path() + "/dir/a");
  CHECK(got[2].body.empty());
  CHECK(got[3].key == odd_key);  // a header keeps every byte
  CHECK(got[3].body == "line payload");
  std::set<std::string> ids;
  for (const auto& m : got) {
    CHECK(m.message_id.rfind("pillbox-", 0) == 0);
    ids.insert(m.message_id);
  }
  CHECK(ids.size() == 4);
  // The summary names the first and last message ids.
  CHECK(r.err.find("message ids " + got[0].message_id + " to " + got[3].message_id) != std::string::npos);
}

// A queue that exists is left as it is, even of another kind.
void existing_queue_left_alone(e2e::RabbitServer& server) {
  auto c = e2e::amqp_connect(server);
  REQUIRE(c.declare_queue("legacy-submit", {}).has_value());  // classic, no arguments
  e2e::TempDir in;
  const std::string f = in.write("t", "task");
  const auto r = run_pillbox({"submit", "--amqp", server.url(), "--queue", "legacy-submit", f});
  INFO(r.describe());
  CHECK(r.exit_code == 0);
  CHECK(r.err.find("declared") == std::string::npos);
  CHECK(queue_info(server, "legacy-submit").value("type", "") == "classic");
  CHECK(queue_info(server, "legacy-submit.dlq").is_null());
  CHECK(drain(c, "legacy-submit").size() == 1);
}

// What the broker refuses is exit 3, with how many went in.
void refusal_is_exit_3(e2e::RabbitServer& server) {
  auto c = e2e::amqp_connect(server);
  // A queue that holds one message and refuses more. (Classic: a quorum
  // queue checks its length after the fact, so that a burst goes over it.)
  REQUIRE(c.declare_queue("full", {{"x-max-length", std::int64_t{1}}, {"x-overflow", std::string("reject-publish")}})
              .has_value());
  e2e::TempDir in;
  std::vector<std::string> args = {"submit", "--amqp", server.url(), "--queue", "full"};
  for (int i = 0; i < 3; ++i) args.push_back(in.write("t" + std::to_string(i), "task " + std::to_string(i)));
  const auto r = run_pillbox(args);
  INFO(r.describe());
  CHECK(r.exit_code == 3);
  CHECK(r.err.find("refused 2 messages (basic.nack): the queue is full") != std::string::npos);
  CHECK(r.err.find("0 tasks were added before this batch") != std::string::npos);
  // A batch refused whole (as a quorum queue refuses all while it has no
  // leader) is sent again a few times, backing off, before it is an error;
  // a batch refused in part (above) is not, since which went in is unknown.
  const auto whole = run_pillbox({"submit", "--amqp", server.url(), "--queue", "full", in.write("t3", "task 3")});
  INFO(whole.describe());
  CHECK(whole.exit_code == 3);
  CHECK(whole.err.find("refused 1 message (basic.nack): the queue is full") != std::string::npos);
  CHECK(whole.err.find("(refused 6 times)") != std::string::npos);
  const auto kept = drain(c, "full");
  REQUIRE(kept.size() == 1);
  CHECK(kept[0].body == "task 0");
}

// A broker that blocks publishers (memory alarm) ends submit with why, not a hang.
void blocked_broker(e2e::RabbitServer& server) {
  e2e::TempDir in;
  const std::string f = in.write("t", "task");
  // A high-water mark of 0 raises the memory alarm at once: the broker
  // blocks every connection that publishes.
  auto set = server.ctl({"set_vm_memory_high_watermark", "0"});
  REQUIRE_MESSAGE(set.exit_code == 0, set.err);
  const auto r = run_pillbox({"submit", "--amqp", server.url(), "--queue", "blocked", f});
  auto reset = server.ctl({"set_vm_memory_high_watermark", "0.4"});
  REQUIRE_MESSAGE(reset.exit_code == 0, reset.err);
  INFO(r.describe());
  CHECK(r.exit_code == 3);
  CHECK(r.err.find("did not confirm 1 message within 5 s (it blocks publishers: low on memory)") !=
        std::string::npos);
  CHECK(r.err.find("may or may not be in the queue") != std::string::npos);
}

}  // namespace

TEST_CASE("submit --amqp against a real broker: exact bytes, a queue left alone, refusals, a blocked broker") {
  e2e::RabbitServer server;
  REQUIRE_RABBITMQ(server);
  {
    INFO("submit --amqp: files, a directory and JSON lines become one confirmed message each, exact bytes");
    exact_bytes(server);
  }
  {
    INFO("submit --amqp: a queue that exists is left as it is, even of another kind");
    existing_queue_left_alone(server);
  }
  {
    INFO("submit --amqp: what the broker refuses is exit 3, with how many went in");
    refusal_is_exit_3(server);
  }
  {
    INFO("submit --amqp: a broker that blocks publishers (memory alarm) ends submit with why, not a hang");
    blocked_broker(server);
  }
}

TEST_CASE("submit --amqp: usage errors and an unreachable broker are one line each") {
  e2e::TempDir in;
  const std::string f = in.write("t", "task");
  struct Case {
    std::vector<std::string> args;
    int exit_code;
    std::string says;
  };
  const std::vector<Case> cases = {
      {{"--amqp", "amqp://127.0.0.1:1/%2f", f}, 2, "--amqp needs --queue NAME"},
      {{"--queue", "q", f}, 2, "--queue NAME goes with --amqp URL"},
      {{"--amqp", "amqp://127.0.0.1:1/%2f", "--queue", "q", "--stream", "s", f}, 2, "--stream does not go with --amqp"},
      {{"--amqp", "amqp://127.0.0.1:1/%2f", "--queue", "q", "--redis", "redis://127.0.0.1:1", f}, 2,
       "--redis does not go with --amqp"},
      {{"--amqp", "http://127.0.0.1/", "--queue", "q", f}, 2, "is not amqp://USER:PASS@HOST:PORT/VHOST"},
      {{"--amqp", "amqp://127.0.0.1:1/%2f", "--queue", "q"}, 2, "no inputs"},
      // NAME.dlq.lock.ID would be over 255 bytes: refused before anything is sent.
      {{"--amqp", "amqp://127.0.0.1:1/%2f", "--queue", std::string(228, 'q'), f}, 2,
       "--queue NAME is 228 bytes long; at most 227"},
      {{"--amqp", "amqp://127.0.0.1:1/%2f", "--queue", std::string(227, 'q'), f}, 3, "cannot reach RabbitMQ"},
      {{f}, 2, "--redis URL --stream NAME (Redis), --amqp URL --queue NAME (RabbitMQ) or --kafka BROKERS --topic NAME (Kafka) is required"},
      {{"--amqp", "amqp://u:secret@127.0.0.1:1/%2f", "--queue", "q", f}, 3, "cannot reach RabbitMQ at amqp://u@127.0.0.1:1/%2f: Connection refused"},
  };
  for (const Case& c : cases) {
    std::vector<std::string> args = {"submit"};
    args.insert(args.end(), c.args.begin(), c.args.end());
    const auto r = run_pillbox(args);
    INFO(r.describe());
    CHECK(r.exit_code == c.exit_code);
    CHECK(r.err.find(c.says) != std::string::npos);
    CHECK(r.err.find("secret") == std::string::npos);
    CHECK(std::count(r.err.begin(), r.err.end(), '\n') == 1);
  }
}
