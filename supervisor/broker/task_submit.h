#pragma once
// pillbox submit: a source's tasks (read as `run` reads them) added to a
// broker for the fleet's workers. The loop is written once here; each back
// end is a TaskPublisher (a Redis stream: stream_publisher.h; a RabbitMQ
// queue: amqp_publisher.h).
#include <cstddef>
#include <functional>
#include <string>
#include <vector>

#include "shared/status.h"
#include "supervisor/exec/task_source.h"

namespace pillbox::broker {

// Where a batch of tasks goes: the back end adds them in order and returns
// once the broker holds them (each acknowledged, not just sent), with the
// id the broker knows each by (a stream entry id, a message id).
class TaskPublisher {
 public:
  virtual ~TaskPublisher() = default;
  // An error names what failed; nothing is said of which tasks of the
  // batch went in (the caller's error says how many did before it).
  virtual Expected<std::vector<std::string>> add(const std::vector<Task>& batch) = 0;
};

struct SubmitReport {
  std::size_t submitted = 0;
  std::size_t input_errors = 0;
  std::string first_id;  // the broker's ids, "" when none was added
  std::string last_id;
};

// Reads `source` to its end and adds each task through `publisher`, in
// batches (at most kSubmitBatchTasks tasks or kSubmitBatchBytes of payload;
// what is read goes out before the source is waited for). An input that is
// not a task goes to `on_input_error` and is counted. An error of the
// broker stops it; what was added before stays added (the report of a
// failure is not returned: the error says how many went in).
// A payload larger than `max_payload` is not added: an input error that
// names it (the broker would refuse it, or the workers dead-letter it unrun).
inline constexpr std::size_t kSubmitBatchTasks = 256;
inline constexpr std::size_t kSubmitBatchBytes = 64u << 20;
Expected<SubmitReport> submit_tasks(TaskPublisher& publisher, TaskSource& source,
                                    const std::function<void(const std::string&)>& on_input_error,
                                    std::size_t max_payload);

}  // namespace pillbox::broker
