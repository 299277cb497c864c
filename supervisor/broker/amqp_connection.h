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
#include <memory>
#include <optional>
#include <set>
#include <string>
#include <string_view>
#include <vector>

#include "shared/status.h"
#include "shared/unique_fd.h"
#include "supervisor/broker/amqp_value.h"

namespace pillbox::broker {

class SocketWatchdog;

struct AmqpAddress {
  std::string host;
  int port = 5672;
  std::string user;
  std::string password;
  std::string vhost = "/";
  // Whether the URL had a password (amqp://USER:PASS@...); else `password`
  // is the spec's default, guest, unless kAmqpPasswordEnv gives one.
  bool password_in_url = false;
  std::string describe() const;  // "amqp://USER@HOST:PORT/VHOST" (the vhost URL-encoded; no password)
  // A URL that parse_amqp_url reads back as this address without its
  // password (user and vhost URL-encoded): what a command line may show,
  // the password going beside it in kAmqpPasswordEnv.
  std::string url_without_password() const;
};

// The password of an --amqp URL that has none (amqp://USER@HOST/...), so
// that it stays off command lines, which any local user can read
// (/proc/PID/cmdline); a password in the URL wins, as libpq's does over
// PGPASSWORD. Read by the CLI (supervisor/cli/fleet_key_option.h), and
// given by serve to the jobs it runs.
inline constexpr const char* kAmqpPasswordEnv = "PILLBOX_AMQP_PASSWORD";

// amqp://[USER[:PASS]@]HOST[:PORT][/VHOST] (rabbitmq-c's amqp_parse_url,
// as the AMQP URI spec has it: user and password guest when not given,
// vhost "/" when there is no path, an empty vhost for a bare "/", %2f for
// "/" in a vhost, no host is localhost). amqps is refused (this build
// connects without TLS), and so is a field that decodes to a control
// character or NUL. Usage errors (ErrorCode::kUsage) say what is wrong.
Expected<AmqpAddress> parse_amqp_url(std::string_view url);

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

// One message basic.get or a consume handed over, unacknowledged until
// ack() or reject(). Its properties and headers are the publisher's claims.
struct AmqpMessage {
  std::uint64_t delivery_tag = 0;
  std::string body;
  // Its size as the broker announced and sent it; body_omitted: over the
  // connection's keep_bodies_up_to, read off the socket and not kept
  // (`body` is then empty).
  std::uint64_t body_size = 0;
  bool body_omitted = false;
  // When body_omitted: the sha256 (hex) of the body that was read and
  // dropped, so that what was not kept can still be checked.
  std::string omitted_body_sha256;
  std::string message_id;
  std::string correlation_id;
  std::string reply_to;
  AmqpTable headers;          // all of them, as sent (nesting cut at kMaxAmqpDepth)
  bool headers_cut = false;   // some were nested deeper
  std::optional<std::string> key;  // the header `key` (pillbox submit's), when it is a string
  // The broker's count of earlier deliveries of it (a quorum queue's
  // x-delivery-count header; 0 when absent: its first).
  std::int64_t delivery_count = 0;
  // A dead letter's first reason, as the broker wrote it (x-first-death-reason:
  // rejected, expired, maxlen, delivery_limit); "" for other messages.
  std::string first_death_reason;
};

// A message to publish: persistent, to the default exchange.
struct AmqpOutgoing {
  std::string_view body;
  std::string message_id;             // "" none; else a name (1-255 bytes, no NUL)
  AmqpTable headers;                  // the message's headers table
  std::string correlation_id;         // "" none (the RPC pattern: a reply names its request)
  std::string reply_to;               // "" none
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
  // This connection's number, unique among those this process opened
  // (never 0). A delivery tag belongs to the connection it came on: work
  // that holds one acknowledges it only on the connection with this id
  // (the broker requeued the message when the other one ended).
  std::uint64_t id() const { return id_; }
  // The socket, for shutdown(2) from another thread: a call blocked on the
  // broker returns at once (a failure). A second descriptor of it, held as
  // long as this object lives: rabbitmq-c closes its own when the
  // connection breaks, and this number must not become another file's
  // while another thread may still shut it down.
  int fd() const { return socket_.get(); }
  // The broker's version ("3.10.8"), from what it said at the handshake.
  const std::string& server_version() const { return server_version_; }

  // queue.declare: durable, not exclusive, not auto-deleted, with
  // `arguments`. A queue that exists with other arguments is refused by
  // the broker (406; refusal() has its words).
  Expected<AmqpQueueState> declare_queue(const std::string& name, const std::vector<AmqpField>& arguments);
  // queue.declare, passive: the queue's state, or 404 when there is none.
  Expected<AmqpQueueState> check_queue(const std::string& name);
  // queue.declare of a queue only this connection may use, which the
  // broker deletes when the connection ends (a lock that a process killed
  // cannot leave behind). Another connection's is refused (405
  // RESOURCE_LOCKED; refusal() has it); this one's, declared again, is fine.
  Status declare_exclusive_queue(const std::string& name);
  // exchange.declare: durable, not auto-deleted.
  Status declare_exchange(const std::string& name, const std::string& type);
  Status bind_queue(const std::string& queue, const std::string& exchange, const std::string& routing_key);
  // queue.delete (if it exists); what it held is gone.
  Status delete_queue(const std::string& name);
  // exchange.delete, with its bindings (tests: a topology broken under a
  // running worker).
  Status delete_exchange(const std::string& name);

  // confirm.select: from now on the broker confirms each publish, and a
  // publish it cannot route to a queue is returned (mandatory). Called
  // again on the same connection: nothing changes.
  Status confirm_publishes();
  // basic.publish to the default exchange (routing key `queue`), persistent.
  // Without confirms, a refusal shows on a later call. The send has a
  // deadline (the timeout, plus a second per MiB of body): a broker that
  // stops reading (a memory or disk alarm blocks publishers) ends it with
  // an error, and the connection with it.
  Status publish(const std::string& queue, const AmqpOutgoing& message);
  // The same to an exchange (routing key ""): a fanout's every queue.
  Status publish_to_exchange(const std::string& exchange, const AmqpOutgoing& message);
  Status publish(const std::string& queue, std::string_view body, const std::string& message_id = "") {
    AmqpOutgoing m;
    m.body = body;
    m.message_id = message_id;
    return publish(queue, m);
  }
  // After confirm_publishes(): waits until the broker has confirmed every
  // message published so far. An error when it refused one (basic.nack: a
  // full queue with x-overflow reject-publish, a quorum queue without a
  // leader), returned one (no such queue), closed the channel (a message
  // over its max_message_size), or said nothing for the timeout (with why,
  // when it said it blocks publishers). Which messages of those unconfirmed
  // went in is not known then.
  Status wait_confirmed();
  // Of the messages the last wait_confirmed() waited for, how many the
  // broker refused (basic.nack: not enqueued), and how many it waited for.
  std::uint64_t last_refused() const { return last_wait_.refused; }
  std::uint64_t last_waited() const { return last_wait_.waited; }
  // basic.get: one message, or none when the queue has none ready.
  Expected<std::optional<AmqpMessage>> get(const std::string& queue);
  // basic.qos(prefetch) and basic.consume of `queue`, acknowledged by
  // ack()/reject(); `arguments` as the queue type wants them (a stream
  // queue's x-stream-offset).
  Status consume(const std::string& queue, std::uint16_t prefetch, const std::vector<AmqpField>& arguments = {});
  // The consume's next message, waited for at most `timeout`; none when
  // none came, or when `wake_fd` (>= 0: a link's wake_fd()) became
  // readable first (its count is left as it is). A connection.blocked
  // meanwhile is noted (a publish that waits says why), not an error.
  Expected<std::optional<AmqpMessage>> next(std::chrono::milliseconds timeout, int wake_fd);
  Expected<std::optional<AmqpMessage>> next(std::chrono::milliseconds timeout) { return next(timeout, -1); }
  // From now on next(), get() and cancel_consume() keep the body of a
  // message only up to `bytes` (a larger one is read and dropped:
  // body_omitted). A reader that lists messages needs no payload of
  // megabytes in memory; a worker keeps them all (the default).
  void keep_bodies_up_to(std::uint64_t bytes) { kept_body_bytes_ = bytes; }
  // basic.cancel of the consume: the broker delivers nothing more on it.
  // What it delivered before it confirmed is returned, unacknowledged (to
  // ack or reject as any); none when nothing was consumed.
  Expected<std::vector<AmqpMessage>> cancel_consume();
  // A consume is on (consume() answered, not cancelled since).
  bool consuming() const { return !consumer_tag_.empty(); }
  Status ack(std::uint64_t delivery_tag);
  // requeue: back to the queue (a quorum queue counts the delivery), else
  // dead-lettered (reason rejected).
  Status reject(std::uint64_t delivery_tag, bool requeue);

  // The broker's last refusal, or none (cleared by each call).
  const std::optional<AmqpRefusal>& refusal() const { return refusal_; }
  // The connection failed or the broker closed it: every later call fails.
  bool broken() const { return state_ == nullptr; }
  // Once broken: the error of the call that broke it ("" before).
  const std::string& why_broken() const { return why_broken_; }

 private:
  AmqpConnection(AmqpAddress address, amqp_connection_state_t state);
  Status publish_to(const std::string& exchange, const std::string& routing_key, const AmqpOutgoing& message,
                    const std::string& what);
  // The last call's reply as a Status naming `what`; a closed channel is
  // opened again, a closed connection marks this broken.
  Status checked(const std::string& what);
  void close();
  // close(), and `message` kept as why_broken(); returns it.
  std::string broke(std::string message);
  // The next frame, waited for until `deadline` (AMQP_STATUS_TIMEOUT after
  // it, however many frames come: the caller checks after each). A
  // watchdog bounds the wait: rabbitmq-c's loop swallows heartbeats
  // without returning, and the socket is shut down if it outlasts the
  // deadline (the connection is then unusable).
  int wait_frame(amqp_frame_t& frame, std::chrono::steady_clock::time_point deadline);
  // A message's header and body frames, each waited for until the
  // connection's timeout, the whole body within the timeout plus a second
  // per MiB;
  // any failure breaks the connection. `keep_body` false: read and dropped
  // (a returned message).
  Expected<AmqpMessage> read_content(std::uint64_t delivery_tag, const std::string& of, bool keep_body = true);

  AmqpAddress address_;
  std::uint64_t id_ = 0;
  amqp_connection_state_t state_ = nullptr;
  UniqueFd socket_;  // fd(): the socket's second descriptor
  std::string why_broken_;
  amqp_channel_t channel_ = 1;
  std::chrono::milliseconds timeout_{5000};
  std::string server_version_;
  std::optional<AmqpRefusal> refusal_;
  struct LastWait {
    std::uint64_t waited = 0;
    std::uint64_t refused = 0;
  } last_wait_;
  // Publisher confirms (confirm_publishes, wait_confirmed).
  struct Confirms {
    bool on = false;
    std::uint64_t published = 0;  // delivery tags: the last published,
    std::uint64_t confirmed = 0;  // and all up to this one acked or nacked
    std::set<std::uint64_t> ahead;  // confirmed one by one beyond `confirmed`
    std::uint64_t refused = 0;    // nacked since the last wait
    std::uint64_t returned = 0;   // returned (unroutable) since the last wait
    std::string return_text;      // the first return's reply text
  } confirms_;
  std::uint64_t kept_body_bytes_ = ~std::uint64_t{0};  // keep_bodies_up_to
  std::string consumer_tag_;  // the consume's (consume), until it is cancelled
  std::string blocked_;  // connection.blocked's reason, while the broker blocks publishers
  std::unique_ptr<SocketWatchdog> watchdog_;  // publish's deadline, made at the first publish
};

}  // namespace pillbox::broker
