#pragma once
// One broker connection on a thread of its own, written once for every
// broker pillbox speaks to: Redis's link (broker_link.h) and RabbitMQ's
// (amqp_link.h) are adapters over it. A slow or restarting broker never
// stalls the dispatcher: posted work runs in order on the link's thread;
// what it returns runs on the owner's thread in drain(), signalled through
// wait_fd().
//
// On a broken connection, or when the broker answers that it cannot serve
// now (Redis's LOADING, OOM, ...), the link backs off (100 ms doubling to
// 5 s), connects again when needed (and runs the link's Setup on the new
// connection) and runs the same work again: work must be safe to repeat.
// The owner hears once that the broker is lost and once that it is back;
// what counts as back is the broker's to say (LinkRules).
//
// Periodic work (Redis's claim renewal) runs on the link's own clock, so it
// happens even while every slot is busy and the dispatcher has no reason to
// turn. Idle work (RabbitMQ's consume loop) runs while nothing is posted,
// and gives way when wake_fd() says work came.
//
// Why a class template over the connection type rather than a base class
// with the connection's parts virtual: work takes the connection itself
// (RedisConnection&, AmqpConnection&), so the queue is typed by it either
// way; what differs between brokers is a few facts known when compiling
// (LinkRules below); and the link's thread would call virtual functions of
// an object whose derived part is already destroyed unless every back end
// remembered to stop the thread in its own destructor. Each adapter instantiates the
// template once, in its .cpp, next to its LinkRules; its header says
// `extern template`, so no other file compiles the link again.
#include <algorithm>
#include <chrono>
#include <condition_variable>
#include <deque>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <utility>

#include "shared/status.h"
#include "shared/unique_fd.h"

namespace pillbox::broker {

// What running one work showed of the broker.
enum class BrokerShowed {
  kServes,          // it answered: a broker that was lost is back
  kNothing,         // the work sent nothing (a renewal with nothing to renew): no news either way
  kCannotServeNow,  // it answered that it cannot serve now: wait on the same connection, run it again
  kLost,            // the connection broke: wait, connect again, run it again
};

// What a link knows of one broker's connection type C, specialised in its
// adapter's .cpp (never used elsewhere):
//   using Mark = ...;                         taken before each work,
//   static Mark mark(const C&);
//   static BrokerShowed after(const C&, const Mark& before);   and read after it;
//   static std::string lost(const C&, const std::string& link_name, BrokerShowed showed);
//                                             the owner's notice when it is lost;
//   static constexpr bool kServesOnceConnected;  whether a new connection whose
//                                             Setup succeeded is back (else: the
//                                             first work that shows kServes).
// Of C itself the link needs move construction and `int fd() const`: its
// socket, open for as long as the object lives (stop() shuts it down from
// the owner's thread). How to open one is the adapter's (Connect).
template <class Connection>
struct LinkRules;

// The parts of the link that do not depend on the connection type.
namespace link_detail {
inline constexpr std::chrono::milliseconds kFirstBackoff{100};
inline constexpr std::chrono::milliseconds kMaxBackoff{5000};
// A non-blocking, close-on-exec eventfd, or -1.
int make_event_fd();
// Makes `fd` readable (its count goes up by one).
void raise_event(int fd);
// Makes it unreadable again.
void clear_event(int fd);
// On the link's thread: signals are for the dispatcher's thread (SIGTERM stops the worker there).
void block_all_signals();
// A call blocked on the socket returns at once (a failure).
void shut_down_socket(int fd);
}  // namespace link_detail

template <class Connection>
class ConnectionLink {
 public:
  // Runs on the link's thread; returns what to do on the owner's thread.
  using Done = std::function<void()>;
  using Work = std::function<Done(Connection&)>;
  // On the owner's thread: the connection was lost (`up` false, with the
  // error) or is back (`up` true).
  using StateChange = std::function<void(bool up, const std::string& what)>;
  // Runs on the link's thread on every new connection, before any work
  // (the first connection's ran in the adapter's open()). A failure counts
  // as a lost connection: the link waits, connects again and runs it again.
  using Setup = std::function<Status(Connection&)>;

  ConnectionLink(const ConnectionLink&) = delete;
  ConnectionLink& operator=(const ConnectionLink&) = delete;

  // Queues work; it runs after everything posted before it.
  void post(Work work);
  // Runs `work` every `every` (from now), between the posted work.
  void set_periodic(std::chrono::milliseconds every, Work work);
  // While nothing is posted, runs `idle` again and again (a consume loop).
  // It must return soon after wake_fd() becomes readable (post(), stop()
  // and set_idle() make it so); its Done runs on the owner's thread like an answer, but is
  // not counted in outstanding(). Periodic work that falls due meanwhile
  // waits for it to return.
  void set_idle(Work idle);
  // For the idle work to wait on (next(timeout, wake_fd())): readable when
  // it should return. The link clears it before each run of the idle work.
  int wake_fd() const { return idle_wake_.get(); }
  // Readable while answers wait to be drained.
  int wait_fd() const { return event_.get(); }
  // Runs the answers that came back, in order. Returns how many.
  std::size_t drain();
  // Posted and not yet drained.
  std::size_t outstanding() const { return outstanding_; }
  // Stops the thread: a call it is blocked in fails at once, the idle work
  // is woken; work still queued is dropped.
  void stop();

 protected:
  // A new connection to the same broker, made on the link's thread.
  using Connect = std::function<Expected<Connection>()>;
  // `first` is open and set up already (an adapter's open() made it, so
  // that an unreachable broker at the start is the caller's error);
  // start() runs the thread.
  ConnectionLink(std::string name, StateChange on_state, Connect connect, Setup setup, Connection first);
  ~ConnectionLink() { stop(); }
  // False when the link's eventfds could not be made (nothing runs then).
  bool start();

 private:
  enum class Kind { kPosted, kPeriodic, kIdle };

  // Waits the backoff (which then doubles) and, when `fresh_connection`,
  // connects again and runs the Setup (waiting and doubling until both
  // succeed); false on stop.
  bool recover(bool fresh_connection);
  void loop();
  void complete(Done done);
  // On the link's thread: the owner hears the broker is back.
  void tell_back();

  std::string name_;
  StateChange on_state_;
  Connect connect_;
  Setup setup_;
  std::unique_ptr<Connection> connection_;
  UniqueFd event_;
  UniqueFd idle_wake_;  // wake_fd()

  std::mutex mutex_;
  std::condition_variable wake_;
  std::deque<Work> queue_;
  std::deque<Done> answers_;
  Work periodic_;
  std::chrono::milliseconds periodic_every_{0};
  std::chrono::steady_clock::time_point periodic_due_{};
  Work idle_;
  bool stopping_ = false;
  // On the link's thread: the broker is lost (the owner was told) since
  // `down_since_`, and the next try waits `backoff_`. Back (and told) when
  // LinkRules says it serves again.
  bool down_ = false;
  std::chrono::steady_clock::time_point down_since_{};
  std::chrono::milliseconds backoff_{0};
  int socket_fd_ = -1;  // the connection's socket, under mutex_ (stop() shuts it down)
  std::size_t outstanding_ = 0;  // the owner's count: posted - drained
  std::thread thread_;
};

template <class Connection>
ConnectionLink<Connection>::ConnectionLink(std::string name, StateChange on_state, Connect connect, Setup setup,
                                           Connection first)
    : name_(std::move(name)),
      on_state_(std::move(on_state)),
      connect_(std::move(connect)),
      setup_(std::move(setup)),
      connection_(std::make_unique<Connection>(std::move(first))),
      event_(link_detail::make_event_fd()),
      idle_wake_(link_detail::make_event_fd()),
      socket_fd_(connection_->fd()) {}

template <class Connection>
bool ConnectionLink<Connection>::start() {
  if (!event_.valid() || !idle_wake_.valid()) return false;
  thread_ = std::thread([this] { loop(); });
  return true;
}

template <class Connection>
void ConnectionLink<Connection>::stop() {
  {
    std::lock_guard lock(mutex_);
    if (stopping_ && !thread_.joinable()) return;
    stopping_ = true;
    // The idle work returns, and a call blocked on the broker (XREADGROUP
    // BLOCK, a publish the broker does not read) returns at once.
    link_detail::raise_event(idle_wake_.get());
    if (socket_fd_ >= 0) link_detail::shut_down_socket(socket_fd_);
  }
  wake_.notify_all();
  if (thread_.joinable()) thread_.join();
}

template <class Connection>
void ConnectionLink<Connection>::post(Work work) {
  ++outstanding_;
  {
    std::lock_guard lock(mutex_);
    queue_.push_back(std::move(work));
    // Under the lock: the link clears it under the lock before the idle
    // work runs, so a post is never lost between the two. Raised whether or
    // not idle work is set now: one set before may still be running (an
    // owner that cleared it, then posts its acknowledgements, must not wait
    // for that run's timeout).
    link_detail::raise_event(idle_wake_.get());
  }
  wake_.notify_all();
}

template <class Connection>
void ConnectionLink<Connection>::set_periodic(std::chrono::milliseconds every, Work work) {
  {
    std::lock_guard lock(mutex_);
    periodic_ = std::move(work);
    periodic_every_ = std::max(every, std::chrono::milliseconds(1));
    periodic_due_ = std::chrono::steady_clock::now() + periodic_every_;
  }
  wake_.notify_all();
}

template <class Connection>
void ConnectionLink<Connection>::set_idle(Work idle) {
  {
    std::lock_guard lock(mutex_);
    idle_ = std::move(idle);
    // The run of the idle work it replaces returns now: the new one (or
    // none) takes effect at once, not after that run's timeout.
    link_detail::raise_event(idle_wake_.get());
  }
  wake_.notify_all();
}

template <class Connection>
std::size_t ConnectionLink<Connection>::drain() {
  link_detail::clear_event(event_.get());
  std::deque<Done> answers;
  {
    std::lock_guard lock(mutex_);
    answers.swap(answers_);
  }
  std::size_t ran = 0;
  for (Done& done : answers) {
    // Periodic and idle work and state changes were never counted as posted.
    if (done) done();
    ++ran;
  }
  return ran;
}

template <class Connection>
void ConnectionLink<Connection>::complete(Done done) {
  {
    std::lock_guard lock(mutex_);
    answers_.push_back(std::move(done));
  }
  link_detail::raise_event(event_.get());
}

template <class Connection>
void ConnectionLink<Connection>::tell_back() {
  down_ = false;
  const auto ms = std::chrono::duration_cast<std::chrono::milliseconds>(std::chrono::steady_clock::now() - down_since_);
  complete([this, ms] { on_state_(true, "after " + std::to_string(ms.count()) + " ms"); });
}

template <class Connection>
bool ConnectionLink<Connection>::recover(bool fresh_connection) {
  for (;;) {
    {
      std::unique_lock lock(mutex_);
      if (wake_.wait_for(lock, backoff_, [this] { return stopping_; })) return false;
    }
    backoff_ = std::min(backoff_ * 2, link_detail::kMaxBackoff);
    if (!fresh_connection) return true;  // the connection is fine; the broker asked us to wait
    auto fresh = connect_();
    if (!fresh) continue;
    auto next = std::make_unique<Connection>(std::move(*fresh));
    {
      // Under the lock: stop() never shuts down a socket number the old
      // connection freed (it could be some other file's by then).
      std::lock_guard lock(mutex_);
      std::swap(connection_, next);
      socket_fd_ = connection_->fd();
    }
    // After the swap: stop() ends a Setup that waits on the broker.
    if (setup_ && !setup_(*connection_)) continue;
    if (LinkRules<Connection>::kServesOnceConnected && down_) tell_back();
    return true;
  }
}

template <class Connection>
void ConnectionLink<Connection>::loop() {
  using Rules = LinkRules<Connection>;
  link_detail::block_all_signals();
  for (;;) {
    Work work;
    Kind kind = Kind::kPosted;
    {
      std::unique_lock lock(mutex_);
      for (;;) {
        if (stopping_) return;
        if (!queue_.empty()) break;
        if (periodic_ && std::chrono::steady_clock::now() >= periodic_due_) break;
        if (idle_) break;
        if (periodic_) {
          wake_.wait_until(lock, periodic_due_);
        } else {
          wake_.wait(lock);
        }
      }
      if (periodic_ && std::chrono::steady_clock::now() >= periodic_due_) {
        work = periodic_;
        kind = Kind::kPeriodic;
        periodic_due_ = std::chrono::steady_clock::now() + periodic_every_;
      } else if (!queue_.empty()) {
        work = std::move(queue_.front());
        queue_.pop_front();
      } else {
        work = idle_;
        kind = Kind::kIdle;
        link_detail::clear_event(idle_wake_.get());  // see post()
      }
    }
    for (;;) {
      const auto mark = Rules::mark(*connection_);
      Done done = work(*connection_);
      const BrokerShowed showed = Rules::after(*connection_, mark);
      if (showed == BrokerShowed::kServes || showed == BrokerShowed::kNothing) {
        if (down_ && showed == BrokerShowed::kServes) tell_back();
        if (kind != Kind::kPosted) {
          if (done) complete(std::move(done));
        } else {
          complete([this, d = std::move(done)] {
            --outstanding_;
            if (d) d();
          });
        }
        break;
      }
      {
        std::lock_guard lock(mutex_);
        if (stopping_) return;
      }
      if (!down_) {
        // Said once per outage: the tries that fail until the broker serves
        // again (LOADING for as long as a restarted Redis loads) are not news.
        down_ = true;
        down_since_ = std::chrono::steady_clock::now();
        backoff_ = link_detail::kFirstBackoff;
        const std::string why = Rules::lost(*connection_, name_, showed);
        complete([this, why] { on_state_(false, why); });
      }
      if (!recover(showed == BrokerShowed::kLost)) return;
      // Periodic work comes round again on its own clock; idle work after
      // what was posted meanwhile.
      if (kind != Kind::kPosted) break;
    }
  }
}

}  // namespace pillbox::broker
