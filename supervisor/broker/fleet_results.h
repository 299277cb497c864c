#pragma once
// `pillbox results --redis URL --stream NAME`: the outputs workers wrote to
// NAME:results (stream_entry.h result_fields). NAME:results is not signed:
// each entry is checked as read, and one that is not a result is reported as
// such, never guessed at. A key run more than once has a result per run; the
// newest stands, as in a store.
#include <cstdint>
#include <functional>
#include <optional>
#include <set>
#include <string>

#include "shared/status.h"
#include "supervisor/broker/redis_connection.h"

namespace pillbox::broker {

struct FleetResult {
  std::string entry;          // its id on NAME:results
  bool has_key = false;       // an entry without one is not a result (why_not says so)
  std::string key;            // may be "" (a task submitted with an empty key)
  std::string source_entry;   // the task's entry on NAME ("entry"), "" when not said
  std::string redrive_of;     // a replay's redrive: the dead letter it ran again
  std::string worker;
  std::int64_t at_ms = 0;     // when it was written (the entry id's time)
  std::int64_t size = 0;      // of the output, kept or not
  std::optional<std::string> output;  // nullopt: not kept (too large) or unreadable: why_not says
  std::string why_not;
};

// The newest result per key of `results_key`, oldest first, and every entry
// without a key (has_key false); only `keys` when non-empty. At most one
// output is in memory at a time. An error from `fn` stops the walk.
Status each_newest_result(RedisConnection& redis, const std::string& results_key, const std::set<std::string>& keys,
                          const std::function<Status(const FleetResult&)>& fn);

}  // namespace pillbox::broker
