#include "supervisor/broker/task_submit.h"

#include <poll.h>

#include <chrono>
#include <vector>

namespace pillbox::broker {
namespace {

// Blocks until one of the source's fds is readable or its wake-up comes: a
// source that waits (JSON lines on stdin) has nothing to give before that.
void wait_for(const TaskSource& source, const TaskSource::Item& waiting) {
  std::vector<pollfd> fds;
  for (int fd : source.wait_fds()) fds.push_back({fd, POLLIN, 0});
  int timeout_ms = -1;
  if (waiting.wake_at) {
    const auto left = *waiting.wake_at - std::chrono::steady_clock::now();
    timeout_ms = left <= std::chrono::steady_clock::duration::zero()
                     ? 0
                     : static_cast<int>(std::chrono::ceil<std::chrono::milliseconds>(left).count());
  }
  if (fds.empty() && timeout_ms < 0) timeout_ms = 10;  // a source that says nothing more: look again soon
  (void)::poll(fds.data(), fds.size(), timeout_ms);
}

}  // namespace

Expected<SubmitReport> submit_tasks(TaskPublisher& publisher, TaskSource& source,
                                    const std::function<void(const std::string&)>& on_input_error,
                                    std::size_t max_payload) {
  SubmitReport report;
  std::vector<Task> batch;
  std::size_t batch_bytes = 0;
  auto send = [&]() -> Status {
    if (batch.empty()) return Status::ok();
    auto ids = publisher.add(batch);
    if (!ids) {
      return Status::error(ids.error() + " (" + std::to_string(report.submitted) +
                           " tasks were added before this batch)");
    }
    if (!ids->empty()) {
      if (report.first_id.empty()) report.first_id = ids->front();
      report.last_id = ids->back();
    }
    report.submitted += batch.size();
    batch.clear();
    batch_bytes = 0;
    return Status::ok();
  };
  for (;;) {
    TaskSource::Item item = source.next();
    if (item.type == TaskSource::Item::Type::kEnd) break;
    if (item.type == TaskSource::Item::Type::kError) {
      ++report.input_errors;
      on_input_error(item.error);
      continue;
    }
    if (item.type == TaskSource::Item::Type::kWait) {
      // Nothing more for now: what is read so far goes out before we block.
      if (auto s = send(); !s) return Error{s.message()};
      wait_for(source, item);
      continue;
    }
    if (item.task.payload.size() > max_payload) {
      ++report.input_errors;
      on_input_error(item.task.key + ": payload of " + std::to_string(item.task.payload.size()) +
                     " bytes is over --max-payload (" + std::to_string(max_payload) + " bytes): not added");
      continue;
    }
    batch_bytes += item.task.payload.size() + item.task.key.size();
    batch.push_back(std::move(item.task));
    if (batch.size() >= kSubmitBatchTasks || batch_bytes >= kSubmitBatchBytes) {
      if (auto s = send(); !s) return Error{s.message()};
    }
  }
  if (auto s = send(); !s) return Error{s.message()};
  return report;
}

}  // namespace pillbox::broker
