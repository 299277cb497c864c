#pragma once
// pillbox submit's Redis back end: each task one entry of the stream, with
// fields `key` and `payload` (exact bytes), added by a pipelined XADD per
// batch. See docs/distributed.md, Keys and fields.
#include <string>

#include "supervisor/broker/redis_connection.h"
#include "supervisor/broker/task_submit.h"

namespace pillbox::broker {

// Redis refuses strings over 512 MiB (its proto-max-bulk-len) by closing
// the connection: submit's default --max-payload.
inline constexpr std::size_t kDefaultMaxStreamPayload = 512u << 20;

class StreamPublisher : public TaskPublisher {
 public:
  StreamPublisher(RedisConnection& redis, std::string stream) : redis_(redis), stream_(std::move(stream)) {}
  // The entry ids Redis gave the tasks.
  Expected<std::vector<std::string>> add(const std::vector<Task>& batch) override;

 private:
  RedisConnection& redis_;
  std::string stream_;
};

}  // namespace pillbox::broker
