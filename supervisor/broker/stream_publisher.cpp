#include "supervisor/broker/stream_publisher.h"

namespace pillbox::broker {

Expected<std::vector<std::string>> StreamPublisher::add(const std::vector<Task>& batch) {
  std::vector<std::vector<std::string_view>> commands;
  commands.reserve(batch.size());
  for (const Task& t : batch) commands.push_back({"XADD", stream_, "*", "key", t.key, "payload", t.payload});
  auto replies = redis_.pipeline(commands);
  if (!replies) return Error{replies.error()};
  std::vector<std::string> ids;
  ids.reserve(replies->size());
  for (const RedisReply& r : *replies) {
    ids.push_back(r->type == REDIS_REPLY_STRING ? std::string(r->str, r->len) : std::string());
  }
  return ids;
}

}  // namespace pillbox::broker
