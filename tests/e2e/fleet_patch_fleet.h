#pragma once
// One fleet's quarantine for the patch tests (fleet_patch_test,
// fleet_patch_attack_test), whichever broker holds it: what a scenario does
// to it as an operator (pillbox's verbs, workers) and as whoever can write
// to the broker (the record's state and the kept revision bytes changed by
// hand), on a real redis-server or rabbitmq-server the test started.
#include <doctest/doctest.h>

#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>
#include <utility>
#include <vector>

#include "shared/sha256.h"
#include "supervisor/broker/amqp_connection.h"
#include "supervisor/broker/amqp_payload_stream.h"
#include "supervisor/broker/amqp_state_log.h"
#include "supervisor/broker/amqp_stream_reader.h"
#include "supervisor/broker/fleet_state.h"
#include "tests/e2e/amqp_client.h"
#include "tests/e2e/rabbit_server.h"
#include "tests/e2e/redis_server.h"
#include "tests/e2e/support.h"

namespace e2e::fleet_patch {

using json = nlohmann::json;
using pillbox::broker::FleetRevision;
using pillbox::broker::FleetState;
using Tasks = std::vector<std::pair<std::string, std::string>>;
using Env = std::map<std::string, std::string>;

// An environment with no fleet key: an operator who patches without one.
inline const Env kNoKey = {{"PILLBOX_FLEET_KEY", ""}};

// One fleet's quarantine, whichever broker holds it: what the scenarios do to it.
struct Fleet {
  std::string broker;  // "redis", "amqp"
  // pillbox ARGS (a verb and its arguments) on this fleet, with the fleet
  // key unless `env` is kNoKey.
  std::function<e2e::RunResult(std::vector<std::string> args, const Env& env)> pillbox;
  // The worker's arguments: the broken one (mixed_poison), until stopped.
  std::function<std::vector<std::string>()> worker;
  // Adds `tasks` and has a worker dead-letter them (each payload crashes).
  std::function<void(const Tasks& tasks)> dead_letter;
  // What someone with write access to the broker does: the record's state
  // changed by hand, and bytes kept as a revision payload of record `id`
  // (where: FleetRevision::at).
  std::function<void(const std::string& id, const std::function<void(FleetState&)>& change)> forge_state;
  std::function<std::int64_t(const std::string& id, const std::string& bytes)> keep_bytes;
  // The bytes the broker holds for `revision` of `id` replaced by `bytes`.
  std::function<void(const std::string& id, const FleetRevision& revision, const std::string& bytes)> swap_bytes;
  // How many payloads are kept for record `id`'s revisions, named or not.
  std::function<long long(const std::string& id)> kept_count;
  // The ok results' outputs so far, by task key (every one, in order).
  std::function<std::multimap<std::string, std::string>()> outputs;

  e2e::RunResult quarantine(std::vector<std::string> verb, const Env& env = {}) const {
    verb.insert(verb.begin(), "quarantine");
    return pillbox(std::move(verb), env);
  }
  // key -> its record as list --json shows it.
  std::map<std::string, json> records() const {
    const auto r = quarantine({"list", "--json"});
    REQUIRE_MESSAGE(r.exit_code == 0, r.describe());
    std::map<std::string, json> out;
    for (const json& j : r.records) out[j.value("key", "")] = j;
    return out;
  }
  // The record's id as the verbs take it.
  std::string id(const std::string& key) const {
    const auto all = records();
    REQUIRE_MESSAGE(all.count(key) == 1, key);
    const json& id = all.at(key)["id"];
    return id.is_string() ? id.get<std::string>() : id.dump();
  }
  json show(const std::string& id) const {
    const auto r = quarantine({"show", id, "--json"});
    REQUIRE_MESSAGE(r.exit_code == 0, r.describe());
    REQUIRE(r.records.size() == 1);
    return r.records[0];
  }
};

inline std::string payload_file(const e2e::TempDir& dir, const std::string& bytes) {
  return dir.write("payload-" + pillbox::sha256_hex(bytes).substr(0, 12), bytes);
}

// A worker's arguments for one that ends once idle for `idle`.
inline std::vector<std::string> until_idle(std::vector<std::string> worker, const std::string& idle) {
  worker.insert(worker.begin() + 1, {"--exit-when-idle", idle, "--quiet"});
  return worker;
}

// ---- the two brokers ----------------------------------------------------

inline Fleet redis_fleet(const e2e::RedisServer& server, const std::string& name) {
  Fleet f;
  f.broker = "redis";
  f.pillbox = [&server, name](std::vector<std::string> args, const Env& env) {
    args.insert(args.end(), {"--redis", server.url(), "--stream", name});
    return e2e::run_pillbox(args, "", env);  // the key: PILLBOX_FLEET_KEY, set by RedisServer
  };
  f.worker = [&server, name] {
    return std::vector<std::string>{"worker", "--redis", server.url(), "--stream", name, "--backoff-base", "10ms",
                                    "--", e2e::fixture("mixed_poison")};
  };
  f.dead_letter = [&server, name, f](const Tasks& tasks) {
    e2e::add_entries(server, name, tasks);
    const auto r = e2e::run_pillbox(until_idle(f.worker(), "500ms"));
    REQUIRE_MESSAGE(r.exit_code == 0, r.describe());
  };
  f.forge_state = [&server, name](const std::string& id, const std::function<void(FleetState&)>& change) {
    auto redis = e2e::connect(server);
    auto got = redis.command({"HGET", name + ":dlq:state", id});
    REQUIRE(got.has_value());
    auto state = pillbox::broker::parse_state(pillbox::broker::reply_text(got->get()));
    REQUIRE_MESSAGE(state.has_value(), state.error());
    change(*state);
    REQUIRE(redis.command({"HSET", name + ":dlq:state", id, pillbox::broker::state_json(*state)}).has_value());
  };
  f.keep_bytes = [&server, name](const std::string& id, const std::string& bytes) {
    auto redis = e2e::connect(server);
    REQUIRE(redis.command({"HSET", name + ":dlq:revisions:" + id, pillbox::sha256_hex(bytes), bytes}).has_value());
    return std::int64_t{-1};
  };
  f.swap_bytes = [&server, name](const std::string& id, const FleetRevision& v, const std::string& bytes) {
    auto redis = e2e::connect(server);
    REQUIRE(redis.command({"HSET", name + ":dlq:revisions:" + id, v.payload_sha256, bytes}).has_value());
  };
  f.kept_count = [&server, name](const std::string& id) {
    return e2e::redis_integer(server, {"HLEN", name + ":dlq:revisions:" + id});
  };
  f.outputs = [&server, name] {
    std::multimap<std::string, std::string> out;
    for (const auto& e : e2e::stream_entries(server, name + ":results")) {
      const auto key = e.fields.find("key"), output = e.fields.find("output");
      if (key != e.fields.end() && output != e.fields.end()) out.emplace(key->second, output->second);
    }
    return out;
  };
  return f;
}

inline Fleet amqp_fleet(e2e::RabbitServer& server, const std::string& key, const std::string& queue) {
  Fleet f;
  f.broker = "amqp";
  f.pillbox = [&server, key, queue](std::vector<std::string> args, const Env& env) {
    args.insert(args.end(), {"--amqp", server.url(), "--queue", queue});
    if (env.count("PILLBOX_FLEET_KEY") == 0) args.insert(args.end(), {"--fleet-key", key});
    return e2e::run_pillbox(args, "", env);
  };
  f.worker = [&server, key, queue] {
    return std::vector<std::string>{"worker", "--amqp", server.url(), "--queue", queue, "--max-attempts", "1",
                                    "--fleet-key", key, "--backoff-base", "10ms", "--", e2e::fixture("mixed_poison")};
  };
  f.dead_letter = [&server, queue, f](const Tasks& tasks) {
    // The topology first: NAME must exist for a publish to it.
    const auto declared = e2e::run_pillbox(until_idle(f.worker(), "200ms"));
    REQUIRE_MESSAGE(declared.exit_code == 0, declared.describe());
    auto c = e2e::amqp_connect(server);
    REQUIRE(c.confirm_publishes().is_ok());
    for (const auto& [task_key, payload] : tasks) {
      pillbox::broker::AmqpOutgoing m;
      m.body = payload;
      m.message_id = "msg-" + task_key;
      m.headers = {{"key", task_key}};
      REQUIRE(c.publish(queue, m).is_ok());
    }
    REQUIRE(c.wait_confirmed().is_ok());
    const auto w = e2e::run_pillbox(until_idle(f.worker(), "1500ms"));
    REQUIRE_MESSAGE(w.exit_code == 0, w.describe());
  };
  f.forge_state = [&server, queue](const std::string& id, const std::function<void(FleetState&)>& change) {
    auto c = e2e::amqp_connect(server);
    pillbox::broker::AmqpStateLog log(c, queue);
    auto written = log.change(id, [&](FleetState& s) {
      change(s);
      return pillbox::Status::ok();
    });
    REQUIRE_MESSAGE(written.has_value(), written.error());
  };
  f.keep_bytes = [&server, queue](const std::string& id, const std::string& bytes) {
    auto c = e2e::amqp_connect(server);
    auto revisions = pillbox::broker::AmqpPayloadStream::revisions(c, queue);
    auto at = revisions->append(id, bytes);
    REQUIRE_MESSAGE(at.has_value(), at.error());
    return *at;
  };
  // A stream changes no message: the state's offset moved to other bytes of that record.
  f.swap_bytes = [f](const std::string& id, const FleetRevision& v, const std::string& bytes) {
    const std::int64_t at = f.keep_bytes(id, bytes);
    f.forge_state(id, [&](FleetState& s) {
      for (auto& r : s.revisions) {
        if (r.n == v.n) r.at = at;
      }
    });
  };
  // Every payload appended to NAME.dlq.revisions, whichever record's: the
  // scenario that counts them patches one record at a time.
  f.kept_count = [&server, queue](const std::string&) {
    auto c = e2e::amqp_connect(server);
    if (!c.check_queue(queue + ".dlq.revisions")) return 0LL;
    pillbox::broker::AmqpStreamReader reader(c, queue + ".dlq.revisions", 0);
    auto end = reader.end();
    REQUIRE_MESSAGE(end.has_value(), end.error());
    return static_cast<long long>(*end);
  };
  auto seen = std::make_shared<std::multimap<std::string, std::string>>();
  f.outputs = [&server, queue, seen] {
    auto c = e2e::amqp_connect(server);
    for (const auto& m : e2e::drain(c, queue + ".results")) seen->emplace(e2e::header_text(m, "key"), m.body);
    return *seen;
  };
  return f;
}

inline bool has(const std::string& text, const std::string& part) { return text.find(part) != std::string::npos; }

}  // namespace e2e::fleet_patch
