#pragma once
// One Redis connection on a thread of its own, so a slow or restarting Redis
// never stalls the dispatcher. Posted work runs in order on the link's
// thread; what it returns runs on the owner's thread in drain(), signalled
// through wait_fd().
//
// On a broken connection, or a "cannot serve now" reply (LOADING, OOM, ...),
// the link backs off (100 ms doubling to 5 s), reconnects when needed and
// runs the same work again: work must be safe to repeat (stream_protocol.h's
// steps are). The owner hears once that Redis is lost and once that it is
// back, i.e. answering commands again (a restarted Redis accepts connections
// while it still answers LOADING).
//
// Periodic work (claim renewal) runs on the link's own clock, so it happens
// even while every slot is busy and the dispatcher has no reason to turn.
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <deque>
#include <functional>
#include <mutex>
#include <string>
#include <thread>

#include "shared/status.h"
#include "shared/unique_fd.h"
#include "supervisor/broker/redis_connection.h"

namespace pillbox::broker {

class BrokerLink {
 public:
  // Runs on the link's thread; returns what to do on the owner's thread.
  using Done = std::function<void()>;
  using Work = std::function<Done(RedisConnection&)>;
  // On the owner's thread: the connection was lost (`up` false, with the
  // error) or is back (`up` true).
  using StateChange = std::function<void(bool up, const std::string& what)>;

  // Connects once, now: an unreachable server at the start is an error for
  // the caller (it says what to check), not something to retry forever.
  static Expected<std::unique_ptr<BrokerLink>> open(const RedisAddress& address, std::string name,
                                                    StateChange on_state);
  ~BrokerLink();
  BrokerLink(const BrokerLink&) = delete;
  BrokerLink& operator=(const BrokerLink&) = delete;

  // Queues work; it runs after everything posted before it.
  void post(Work work);
  // Runs `work` every `every` (from now), between the posted work.
  void set_periodic(std::chrono::milliseconds every, Work work);
  // Readable while answers wait to be drained.
  int wait_fd() const { return event_.get(); }
  // Runs the answers that came back, in order. Returns how many.
  std::size_t drain();
  // Posted and not yet drained.
  std::size_t outstanding() const { return outstanding_; }
  // Stops the thread: a command it is blocked in fails at once; work still
  // queued is dropped (the protocol leaves such entries pending: nothing is lost).
  void stop();

 private:
  BrokerLink(RedisAddress address, std::string name, StateChange on_state, RedisConnection connection);
  void loop();
  // Waits the backoff (which then doubles) and, when `fresh_connection`,
  // connects again (waiting and doubling until it can); false on stop.
  bool recover(bool fresh_connection);
  void complete(Done done);

  RedisAddress address_;
  std::string name_;
  StateChange on_state_;
  std::unique_ptr<RedisConnection> connection_;
  UniqueFd event_;

  std::mutex mutex_;
  std::condition_variable wake_;
  std::deque<Work> queue_;
  std::deque<Done> answers_;
  Work periodic_;
  std::chrono::milliseconds periodic_every_{0};
  std::chrono::steady_clock::time_point periodic_due_{};
  bool stopping_ = false;
  // On the link's thread: Redis is lost (the owner was told) since
  // `down_since_`, and the next try waits `backoff_`. Back (and told) when a
  // command is answered again.
  bool down_ = false;
  std::chrono::steady_clock::time_point down_since_{};
  std::chrono::milliseconds backoff_{0};
  int socket_fd_ = -1;  // the connection's socket, under mutex_ (stop() shuts it down)
  std::size_t outstanding_ = 0;  // the owner's count: posted - drained
  std::thread thread_;
};

}  // namespace pillbox::broker
