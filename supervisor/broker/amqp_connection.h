#pragma once
// One connection to a RabbitMQ broker over AMQP 0-9-1, through rabbitmq-c
// (Debian's librabbitmq): the URL the operator gives
// (amqp://USER:PASS@HOST:PORT/VHOST), a connect and call timeout, one
// channel, and what the broker said when it refused something. rabbitmq-c
// is synchronous: like the Redis connection, this is never used on the
// dispatcher's thread.
//
// Errors are one line that names the broker (never the password): what
// failed and what to do. What the broker says in them is its claim: cut to
// 300 bytes, control characters replaced, the password masked. Every read
// and write is bounded by the connection's timeout (the socket's own), a
// message's content included; a name is 1 to 255 bytes without NUL
// (checked before it is sent: a usage error, the connection kept). A refusal the broker sends by closing the channel
// (PRECONDITION_FAILED, NOT_FOUND, ACCESS_REFUSED on a resource) leaves the
// connection usable: the channel is opened again, and refusal() says what
// the broker said.
#include <amqp.h>

#include <chrono>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <variant>
#include <vector>

#include "shared/status.h"

namespace pillbox::broker {

struct AmqpAddress {
  std::string host;
  int port = 5672;
  std::string user;
  std::string password;
  std::string vhost = "/";
  std::string describe() const;  // "amqp://USER@HOST:PORT/VHOST" (the vhost URL-encoded; no password)
};

// amqp://[USER[:PASS]@]HOST[:PORT][/VHOST] (rabbitmq-c's amqp_parse_url,
// as the AMQP URI spec has it: user and password guest when not given,
// vhost "/" when there is no path, an empty vhost for a bare "/", %2f for
// "/" in a vhost, no host is localhost). amqps is refused (this build
// connects without TLS), and so is a field that decodes to a control
// character or NUL. Usage errors (ErrorCode::kUsage) say what is wrong.
Expected<AmqpAddress> parse_amqp_url(std::string_view url);

// A queue's or an exchange's x-arguments, as declared: strings and integers.
struct AmqpArgument {
  std::string name;
  std::variant<std::string, std::int64_t> value;
};

// What the broker said when it closed a channel or the connection.
struct AmqpRefusal {
  int code = 0;      // 406 PRECONDITION_FAILED, 404 NOT_FOUND, 403 ACCESS_REFUSED, 530 NOT_ALLOWED, ...
  std::string text;  // the broker's reply text, e.g. "PRECONDITION_FAILED - inequivalent arg 'x-queue-type' ..."
};

// A queue as queue.declare answers: its ready messages and consumers.
struct AmqpQueueState {
  std::uint32_t messages = 0;
  std::uint32_t consumers = 0;
};

// One message basic.get handed over, unacknowledged until ack() or reject().
struct AmqpMessage {
  std::uint64_t delivery_tag = 0;
  std::string body;
  std::string message_id;
  // The broker's count of earlier deliveries of it (a quorum queue's
  // x-delivery-count header; 0 when absent: its first).
  std::int64_t delivery_count = 0;
  // A dead letter's first reason, as the broker wrote it (x-first-death-reason:
  // rejected, expired, maxlen, delivery_limit); "" for other messages.
  std::string first_death_reason;
};

class AmqpConnection {
 public:
  // Connects, logs in (PLAIN) and opens a channel. Setup errors: the broker
  // cannot be reached, refused the login, or has no such vhost.
  static Expected<AmqpConnection> open(const AmqpAddress& address,
                                       std::chrono::milliseconds timeout = std::chrono::seconds(5));
  ~AmqpConnection();
  AmqpConnection(AmqpConnection&& other) noexcept;
  AmqpConnection& operator=(AmqpConnection&& other) noexcept;
  AmqpConnection(const AmqpConnection&) = delete;
  AmqpConnection& operator=(const AmqpConnection&) = delete;

  const AmqpAddress& address() const { return address_; }
  // The broker's version ("3.10.8"), from what it said at the handshake.
  const std::string& server_version() const { return server_version_; }

  // queue.declare: durable, not exclusive, not auto-deleted, with
  // `arguments`. A queue that exists with other arguments is refused by
  // the broker (406; refusal() has its words).
  Expected<AmqpQueueState> declare_queue(const std::string& name, const std::vector<AmqpArgument>& arguments);
  // queue.declare, passive: the queue's state, or 404 when there is none.
  Expected<AmqpQueueState> check_queue(const std::string& name);
  // exchange.declare: durable, not auto-deleted.
  Status declare_exchange(const std::string& name, const std::string& type);
  Status bind_queue(const std::string& queue, const std::string& exchange, const std::string& routing_key);
  // queue.delete (if it exists); what it held is gone.
  Status delete_queue(const std::string& name);

  // basic.publish to the default exchange (routing key `queue`), persistent.
  // Unconfirmed: a refusal shows on a later call.
  Status publish(const std::string& queue, std::string_view body, const std::string& message_id = "");
  // basic.get: one message, or none when the queue has none ready.
  Expected<std::optional<AmqpMessage>> get(const std::string& queue);
  // basic.qos(prefetch) and basic.consume of `queue`, acknowledged by
  // ack()/reject(); `arguments` as the queue type wants them (a stream
  // queue's x-stream-offset).
  Status consume(const std::string& queue, std::uint16_t prefetch, const std::vector<AmqpArgument>& arguments = {});
  // The consume's next message, waited for at most `timeout`; none when
  // none came.
  Expected<std::optional<AmqpMessage>> next(std::chrono::milliseconds timeout);
  Status ack(std::uint64_t delivery_tag);
  // requeue: back to the queue (a quorum queue counts the delivery), else
  // dead-lettered (reason rejected).
  Status reject(std::uint64_t delivery_tag, bool requeue);

  // The broker's last refusal, or none (cleared by each call).
  const std::optional<AmqpRefusal>& refusal() const { return refusal_; }
  // The connection failed or the broker closed it: every later call fails.
  bool broken() const { return state_ == nullptr; }

 private:
  AmqpConnection(AmqpAddress address, amqp_connection_state_t state) : address_(std::move(address)), state_(state) {}
  // The last call's reply as a Status naming `what`; a closed channel is
  // opened again, a closed connection marks this broken.
  Status checked(const std::string& what);
  void close();
  // A message's header and body frames, each waited for until the
  // connection's timeout; any failure breaks the connection.
  Expected<AmqpMessage> read_content(std::uint64_t delivery_tag, const std::string& of);

  AmqpAddress address_;
  amqp_connection_state_t state_ = nullptr;
  amqp_channel_t channel_ = 1;
  std::chrono::milliseconds timeout_{5000};
  std::string server_version_;
  std::optional<AmqpRefusal> refusal_;
};

}  // namespace pillbox::broker
