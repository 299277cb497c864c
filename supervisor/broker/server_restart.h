#pragma once
// What a worker says of a Redis that restarted without (all of) its data,
// noticed by a new run id (ServerState) after an outage. It counts only what
// this worker wrote or held; unrun submissions lost with the stream cannot be
// counted. See docs/distributed.md, What happens when something dies.
#include <cstddef>
#include <deque>
#include <string>

#include "supervisor/broker/stream_protocol.h"

namespace pillbox::broker {

// The ids a worker added to one stream (NAME:results or NAME:dlq), the
// latest `keep` of them remembered (a long-lived worker adds millions).
class WrittenEntries {
 public:
  explicit WrittenEntries(std::size_t keep = 100'000) : keep_(keep) {}
  void add(const std::string& id);
  // Of the remembered ids, how many lie beyond `last` (all when it is "":
  // the stream is gone).
  std::size_t beyond(const std::string& last) const;
  std::size_t total() const { return total_; }
  // Whether every id added is remembered (else a count is "at least").
  bool complete() const { return total_ == ids_.size(); }

 private:
  std::size_t keep_;
  std::size_t total_ = 0;
  std::deque<StreamId> ids_;
};

struct RestartLosses {
  std::size_t results_lost = 0, results_written = 0;
  bool results_complete = true;  // false: "at least"
  std::size_t dead_letters_lost = 0, dead_letters_written = 0;
  bool dead_letters_complete = true;
  std::size_t held_gone = 0;  // entries the worker held, gone with the restart
  bool stream_gone = false;
  bool group_gone = false;
  bool any() const { return results_lost + dead_letters_lost + held_gone > 0 || stream_gone || group_gone; }
};

RestartLosses restart_losses(const ServerState& now, const WrittenEntries& results,
                             const WrittenEntries& dead_letters, std::size_t held_gone);

// One line: "Redis at URL restarted (a new run id) and lost data: ...", or
// that it restarted with everything the worker wrote.
// `where`: the server (RedisAddress::describe).
std::string describe_restart(const std::string& where, const StreamKeys& keys, const std::string& group,
                             const RestartLosses& losses);

}  // namespace pillbox::broker
