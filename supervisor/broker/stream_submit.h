#pragma once
// pillbox submit: a source's tasks (read as `run` reads them) added to a
// Redis stream, one entry per task with fields `key` and `payload` (exact
// bytes). See docs/distributed.md, Keys and fields.
#include <cstddef>
#include <functional>
#include <string>

#include "shared/status.h"
#include "supervisor/broker/redis_connection.h"
#include "supervisor/exec/task_source.h"

namespace pillbox::broker {

struct SubmitReport {
  std::size_t submitted = 0;
  std::size_t input_errors = 0;
  std::string first_id;  // stream entry ids, "" when none was added
  std::string last_id;
};

// Reads `source` to its end and adds each task to `stream`, pipelined in
// batches (at most kSubmitBatchTasks tasks or kSubmitBatchBytes of payload).
// An input that is not a task goes to `on_input_error` and is counted.
// An error of Redis stops it; what was added before stays added (the report
// of a failure is not returned: the error says how many went in).
// A payload larger than `max_payload` is not added: an input error that
// names it (the workers would dead-letter it unrun; Redis refuses strings
// over 512 MiB, its proto-max-bulk-len, by closing the connection).
inline constexpr std::size_t kSubmitBatchTasks = 256;
inline constexpr std::size_t kSubmitBatchBytes = 64u << 20;
inline constexpr std::size_t kDefaultMaxStreamPayload = 512u << 20;
Expected<SubmitReport> submit_tasks(RedisConnection& redis, const std::string& stream, TaskSource& source,
                                    const std::function<void(const std::string&)>& on_input_error,
                                    std::size_t max_payload = kDefaultMaxStreamPayload);

}  // namespace pillbox::broker
