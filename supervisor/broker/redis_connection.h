#pragma once
// One connection to a Redis server, through hiredis: the URL the operator
// gives (redis://HOST:PORT[/DB]), a connect and command timeout, and
// binary-safe commands (every argument is a byte string, payloads included).
// Errors are one line that names the server: what failed and what to do.
#include <hiredis/hiredis.h>

#include <chrono>
#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "shared/status.h"

namespace pillbox::broker {

struct RedisAddress {
  std::string host;
  int port = 6379;
  int db = 0;
  std::string describe() const;  // "redis://host:port/db"
};

// redis://HOST[:PORT][/DB]; usage errors (ErrorCode::kUsage) say what is wrong.
Expected<RedisAddress> parse_redis_url(std::string_view url);

struct RedisReplyFree {
  void operator()(redisReply* r) const { freeReplyObject(r); }
};
using RedisReply = std::unique_ptr<redisReply, RedisReplyFree>;

// A string, status or error reply's bytes; "" for other types.
std::string reply_text(const redisReply* r);
// An integer reply, or a string holding one; `fallback` otherwise.
long long reply_integer(const redisReply* r, long long fallback = -1);

class RedisConnection {
 public:
  // Connects (and SELECTs the database when it is not 0). Errors are setup
  // errors: the server cannot be reached or refused us.
  static Expected<RedisConnection> open(const RedisAddress& address,
                                        std::chrono::milliseconds timeout = std::chrono::seconds(5));

  RedisConnection(RedisConnection&&) noexcept = default;
  RedisConnection& operator=(RedisConnection&&) noexcept = default;

  // One command; a reply of type error is an error here.
  Expected<RedisReply> command(const std::vector<std::string_view>& args);
  // Pipelined: every command is sent, then every reply read, in order. The
  // first failure (or error reply) is the result.
  Expected<std::vector<RedisReply>> pipeline(const std::vector<std::vector<std::string_view>>& commands);

  const RedisAddress& address() const { return address_; }
  // The connection failed (reset, timeout, closed): every later command
  // fails too; a new connection is needed. An error reply leaves it usable.
  bool broken() const { return !context_ || context_->err != 0; }
  // The last command's error reply said Redis cannot serve now but will
  // (LOADING after a restart, BUSY script, OOM over maxmemory, TRYAGAIN,
  // MASTERDOWN, CLUSTERDOWN): worth waiting for, unlike a wrong command.
  bool busy() const { return busy_; }
  // Replies received so far (error replies included): Redis answered.
  std::uint64_t answered() const { return answered_; }
  // The socket, for shutdown(2) from another thread: it makes a command
  // blocked in XREADGROUP return at once (a failure).
  int fd() const { return context_ ? context_->fd : -1; }

 private:
  struct ContextFree {
    void operator()(redisContext* c) const { redisFree(c); }
  };
  RedisConnection(RedisAddress address, redisContext* context) : address_(std::move(address)), context_(context) {}
  std::string failure(const std::string& what) const;

  RedisAddress address_;
  std::unique_ptr<redisContext, ContextFree> context_;
  bool busy_ = false;
  std::uint64_t answered_ = 0;
};

}  // namespace pillbox::broker
