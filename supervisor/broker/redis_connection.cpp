#include "supervisor/broker/redis_connection.h"

#include <charconv>

namespace pillbox::broker {
namespace {

bool parse_int(std::string_view text, int& out) {
  if (text.empty()) return false;
  const auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), out);
  return ec == std::errc() && end == text.data() + text.size();
}

}  // namespace

std::string reply_text(const redisReply* r) {
  if (r == nullptr) return {};
  switch (r->type) {
    case REDIS_REPLY_STRING:
    case REDIS_REPLY_STATUS:
    case REDIS_REPLY_ERROR:
      return std::string(r->str, r->len);
    default:
      return {};
  }
}

long long reply_integer(const redisReply* r, long long fallback) {
  if (r == nullptr) return fallback;
  if (r->type == REDIS_REPLY_INTEGER) return r->integer;
  if (r->type != REDIS_REPLY_STRING) return fallback;
  long long v = 0;
  const auto [end, ec] = std::from_chars(r->str, r->str + r->len, v);
  return ec == std::errc() && end == r->str + r->len ? v : fallback;
}

std::string RedisAddress::describe() const {
  return "redis://" + host + ":" + std::to_string(port) + "/" + std::to_string(db);
}

Expected<RedisAddress> parse_redis_url(std::string_view url) {
  constexpr std::string_view kScheme = "redis://";
  const std::string shown(url);
  if (url.substr(0, kScheme.size()) != kScheme) {
    return Error::usage("--redis '" + shown + "': expected redis://HOST[:PORT][/DB], e.g. redis://127.0.0.1:6379/0");
  }
  std::string_view rest = url.substr(kScheme.size());
  RedisAddress a;
  if (const auto slash = rest.find('/'); slash != std::string_view::npos) {
    if (!parse_int(rest.substr(slash + 1), a.db) || a.db < 0) {
      return Error::usage("--redis '" + shown + "': the database after '/' must be a number (0, 1, ...)");
    }
    rest = rest.substr(0, slash);
  }
  if (rest.find('@') != std::string_view::npos) {
    return Error::usage("--redis '" + shown + "': credentials in the URL are not supported yet");
  }
  if (const auto colon = rest.rfind(':'); colon != std::string_view::npos) {
    if (!parse_int(rest.substr(colon + 1), a.port) || a.port <= 0 || a.port > 65535) {
      return Error::usage("--redis '" + shown + "': the port after ':' must be a number from 1 to 65535");
    }
    rest = rest.substr(0, colon);
  }
  if (rest.empty()) return Error::usage("--redis '" + shown + "': no host (redis://HOST[:PORT][/DB])");
  a.host = std::string(rest);
  return a;
}

Expected<RedisConnection> RedisConnection::open(const RedisAddress& address, std::chrono::milliseconds timeout) {
  const auto s = std::chrono::duration_cast<std::chrono::seconds>(timeout);
  const timeval tv{static_cast<time_t>(s.count()),
                   static_cast<suseconds_t>(std::chrono::duration_cast<std::chrono::microseconds>(timeout - s).count())};
  redisContext* c = redisConnectWithTimeout(address.host.c_str(), address.port, tv);
  if (c == nullptr) return Error{"cannot reach Redis at " + address.describe() + ": out of memory"};
  RedisConnection conn(address, c);
  if (c->err != 0) {
    return Error{"cannot reach Redis at " + address.describe() + ": " + c->errstr +
                 " (is redis-server running there? see --redis)"};
  }
  if (redisSetTimeout(c, tv) != REDIS_OK) return Error{conn.failure("cannot set the command timeout")};
  if (address.db != 0) {
    const std::string db = std::to_string(address.db);
    if (auto r = conn.command({"SELECT", db}); !r) return Error{r.error()};
  }
  return conn;
}

std::string RedisConnection::failure(const std::string& what) const {
  const redisContext* c = context_.get();
  return "Redis at " + address_.describe() + ": " + what + (c != nullptr && c->err != 0 ? std::string(": ") + c->errstr : "");
}

Expected<RedisReply> RedisConnection::command(const std::vector<std::string_view>& args) {
  auto replies = pipeline({args});
  if (!replies) return Error{replies.error()};
  return std::move(replies->front());
}

Expected<std::vector<RedisReply>> RedisConnection::pipeline(const std::vector<std::vector<std::string_view>>& commands) {
  busy_ = false;
  if (!context_ || context_->err != 0) return Error{failure("the connection is broken")};
  std::vector<const char*> argv;
  std::vector<size_t> lens;
  for (const auto& args : commands) {
    argv.clear();
    lens.clear();
    for (std::string_view a : args) {
      argv.push_back(a.data());
      lens.push_back(a.size());
    }
    if (redisAppendCommandArgv(context_.get(), static_cast<int>(argv.size()), argv.data(), lens.data()) != REDIS_OK) {
      return Error{failure("cannot send a command")};
    }
  }
  std::vector<RedisReply> replies;
  std::string first_error;
  for (std::size_t i = 0; i < commands.size(); ++i) {
    void* raw = nullptr;
    if (redisGetReply(context_.get(), &raw) != REDIS_OK || raw == nullptr) {
      return Error{failure("no reply to " + std::string(commands[i].front()))};
    }
    RedisReply reply(static_cast<redisReply*>(raw));
    ++answered_;
    if (reply->type == REDIS_REPLY_ERROR && first_error.empty()) {
      const std::string text(reply->str, reply->len);
      first_error = failure(std::string(commands[i].front()) + " failed: " + text);
      for (const char* prefix : {"LOADING", "BUSY", "OOM", "TRYAGAIN", "MASTERDOWN", "CLUSTERDOWN"}) {
        if (text.rfind(prefix, 0) == 0) busy_ = true;
      }
    }
    replies.push_back(std::move(reply));
  }
  if (!first_error.empty()) return Error{first_error};
  return replies;
}

}  // namespace pillbox::broker
