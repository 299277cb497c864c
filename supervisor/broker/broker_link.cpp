#include "supervisor/broker/broker_link.h"

#include <pthread.h>
#include <signal.h>
#include <sys/eventfd.h>
#include <sys/socket.h>

#include <algorithm>
#include <cstdint>

namespace pillbox::broker {
namespace {

constexpr std::chrono::milliseconds kFirstBackoff{100};
constexpr std::chrono::milliseconds kMaxBackoff{5000};

}  // namespace

Expected<std::unique_ptr<BrokerLink>> BrokerLink::open(const RedisAddress& address, std::string name,
                                                       StateChange on_state) {
  auto connection = RedisConnection::open(address);
  if (!connection) return Error{connection.error(), connection.error_code()};
  std::unique_ptr<BrokerLink> link(new BrokerLink(address, std::move(name), std::move(on_state), std::move(*connection)));
  if (!link->event_.valid()) return Error{"cannot create an eventfd for the Redis link"};
  link->thread_ = std::thread([l = link.get()] { l->loop(); });
  return link;
}

BrokerLink::BrokerLink(RedisAddress address, std::string name, StateChange on_state, RedisConnection connection)
    : address_(std::move(address)),
      name_(std::move(name)),
      on_state_(std::move(on_state)),
      connection_(std::make_unique<RedisConnection>(std::move(connection))),
      event_(::eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK)),
      socket_fd_(connection_->fd()) {}

BrokerLink::~BrokerLink() { stop(); }

void BrokerLink::stop() {
  {
    std::lock_guard lock(mutex_);
    if (stopping_ && !thread_.joinable()) return;
    stopping_ = true;
    // A command blocked on the server (XREADGROUP BLOCK) returns at once.
    if (socket_fd_ >= 0) ::shutdown(socket_fd_, SHUT_RDWR);
  }
  wake_.notify_all();
  if (thread_.joinable()) thread_.join();
}

void BrokerLink::post(Work work) {
  ++outstanding_;
  {
    std::lock_guard lock(mutex_);
    queue_.push_back(std::move(work));
  }
  wake_.notify_all();
}

void BrokerLink::set_periodic(std::chrono::milliseconds every, Work work) {
  {
    std::lock_guard lock(mutex_);
    periodic_ = std::move(work);
    periodic_every_ = std::max(every, std::chrono::milliseconds(1));
    periodic_due_ = std::chrono::steady_clock::now() + periodic_every_;
  }
  wake_.notify_all();
}

std::size_t BrokerLink::drain() {
  std::uint64_t ignored = 0;
  (void)!::read(event_.get(), &ignored, sizeof ignored);
  std::deque<Done> answers;
  {
    std::lock_guard lock(mutex_);
    answers.swap(answers_);
  }
  std::size_t ran = 0;
  for (Done& done : answers) {
    // Periodic work and state changes were never counted as posted.
    if (done) done();
    ++ran;
  }
  return ran;
}

void BrokerLink::complete(Done done) {
  {
    std::lock_guard lock(mutex_);
    answers_.push_back(std::move(done));
  }
  const std::uint64_t one = 1;
  (void)!::write(event_.get(), &one, sizeof one);
}

bool BrokerLink::recover(bool fresh_connection) {
  for (;;) {
    {
      std::unique_lock lock(mutex_);
      if (wake_.wait_for(lock, backoff_, [this] { return stopping_; })) return false;
    }
    backoff_ = std::min(backoff_ * 2, kMaxBackoff);
    if (!fresh_connection) return true;  // the connection is fine; Redis asked us to wait
    auto fresh = RedisConnection::open(address_);
    if (!fresh) continue;
    auto next = std::make_unique<RedisConnection>(std::move(*fresh));
    {
      // Under the lock: stop() never shuts down a socket number the old
      // connection freed (it could be some other file's by then).
      std::lock_guard lock(mutex_);
      std::swap(connection_, next);
      socket_fd_ = connection_->fd();
    }
    return true;
  }
}

void BrokerLink::loop() {
  // Signals are for the dispatcher's thread (SIGTERM stops the worker there).
  sigset_t all;
  ::sigfillset(&all);
  ::pthread_sigmask(SIG_BLOCK, &all, nullptr);
  for (;;) {
    Work work;
    bool periodic = false;
    {
      std::unique_lock lock(mutex_);
      for (;;) {
        if (stopping_) return;
        if (!queue_.empty()) break;
        if (periodic_ && std::chrono::steady_clock::now() >= periodic_due_) break;
        if (periodic_) {
          wake_.wait_until(lock, periodic_due_);
        } else {
          wake_.wait(lock);
        }
      }
      if (periodic_ && std::chrono::steady_clock::now() >= periodic_due_) {
        work = periodic_;
        periodic = true;
        periodic_due_ = std::chrono::steady_clock::now() + periodic_every_;
      } else {
        work = std::move(queue_.front());
        queue_.pop_front();
      }
    }
    for (;;) {
      const std::uint64_t answered = connection_->answered();
      Done done = work(*connection_);
      if (!connection_->broken() && !connection_->busy()) {
        // Back once Redis answered: a connection that opens, or work that
        // sends nothing (a renewal with nothing to renew), says nothing of
        // a Redis that still refuses to serve.
        if (down_ && connection_->answered() != answered) {
          down_ = false;
          const auto ms =
              std::chrono::duration_cast<std::chrono::milliseconds>(std::chrono::steady_clock::now() - down_since_);
          complete([this, ms] { on_state_(true, "after " + std::to_string(ms.count()) + " ms"); });
        }
        if (periodic) {
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
      const bool busy = !connection_->broken();
      if (!down_) {
        // Said once per outage: the tries that fail until Redis answers
        // again (LOADING for as long as a restarted Redis loads) are not news.
        down_ = true;
        down_since_ = std::chrono::steady_clock::now();
        backoff_ = kFirstBackoff;
        const std::string why = connection_->address().describe() + " (" + name_ + "): " +
                                (busy ? "it answers that it cannot serve now (loading, busy or full)"
                                      : "the connection was lost");
        complete([this, why] { on_state_(false, why); });
      }
      if (!recover(!busy)) return;
      if (periodic) break;  // it comes round again on its own clock
    }
  }
}

}  // namespace pillbox::broker
