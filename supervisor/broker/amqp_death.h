#pragma once
// RabbitMQ's own history of a dead-lettered message, the x-death header:
// one entry per queue and reason it was dead-lettered from (the newest
// first), each with its count. pillbox shows it as the broker wrote it
// beside its own record, and reads it to tell a message the broker
// dead-lettered itself (delivery_limit: it killed every worker) from one
// pillbox judged. What the header says is a claim of whoever published the
// message: only the known reasons are taken as such, counts are clamped,
// and at most kMaxAmqpDeaths entries are read.
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "supervisor/broker/amqp_value.h"

namespace pillbox::broker {

struct AmqpDeath {
  // rejected, expired, maxlen or delivery_limit; another word is kept as
  // "other" (`said` has it).
  std::string reason;
  std::string said;                       // the reason as written, when not a known one
  std::string queue;                      // where it was dead-lettered from
  std::string exchange;                   // where it had been published to
  std::vector<std::string> routing_keys;
  std::int64_t count = 0;                 // 0 .. 2^31 - 1
  std::optional<std::int64_t> time_s;     // when (seconds since the epoch), when given
};

struct AmqpDeaths {
  std::vector<AmqpDeath> deaths;  // as the header lists them (the newest first)
  std::size_t unreadable = 0;     // entries that were not a table with a reason and a queue, or past the limit
};

inline constexpr std::size_t kMaxAmqpDeaths = 64;

AmqpDeaths deaths_of(const AmqpTable& headers);

// [{"reason": ..., "queue": ..., "count": ..., "time": ..., "exchange": ...,
//   "routing_keys": [...]}, ...], and "unreadable" when any were.
nlohmann::json to_json(const AmqpDeaths& deaths);

}  // namespace pillbox::broker
