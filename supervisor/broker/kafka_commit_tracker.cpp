#include "supervisor/broker/kafka_commit_tracker.h"

#include <algorithm>

namespace pillbox::broker {

KafkaCommitTracker::KafkaCommitTracker(std::int64_t committed) : start_(committed >= 0 ? committed : -1) {}

void KafkaCommitTracker::read(std::int64_t offset) {
  if (offset < next_read_ || offset < start_) return;  // read before: a second read changes nothing
  if (start_ < 0) start_ = offset;
  open_.emplace(offset, false);
  next_read_ = offset + 1;
}

void KafkaCommitTracker::settled(std::int64_t offset) {
  if (auto it = open_.find(offset); it != open_.end()) it->second = true;
}

std::int64_t KafkaCommitTracker::committable() const {
  for (const auto& [offset, done] : open_) {
    if (!done) return offset;
  }
  return next_read_ >= 0 ? next_read_ : start_;
}

std::size_t KafkaCommitTracker::settled_beyond() const {
  const std::int64_t from = committable();
  std::size_t n = 0;
  for (auto it = open_.upper_bound(from); it != open_.end(); ++it) n += it->second;
  return n;
}

std::optional<KafkaCommitTracker::Commit> KafkaCommitTracker::commit(const PartitionAttempts& attempts) {
  if (next_read_ < 0) return std::nullopt;
  const std::int64_t offset = committable();
  // What the commit passes is nobody's concern any more: not this worker's
  // (settled), nor the next owner's (it starts after it).
  open_.erase(open_.begin(), open_.lower_bound(offset));
  const Commit c{offset, attempt_log_commit_offset(attempts, offset)};
  if (last_ && last_->offset == c.offset && last_->log_from == c.log_from) return std::nullopt;
  last_ = c;
  return c;
}

}  // namespace pillbox::broker
