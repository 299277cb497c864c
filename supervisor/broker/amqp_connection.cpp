#include "supervisor/broker/amqp_connection.h"

#include "shared/sha256.h"
#include "shared/task_input.h"
#include "supervisor/broker/socket_watchdog.h"

#include <amqp_tcp_socket.h>
#include <fcntl.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cctype>
#include <cerrno>
#include <climits>
#include <cstring>
#include <limits>
#include <utility>

namespace pillbox::broker {
namespace {

timeval to_timeval(std::chrono::milliseconds ms) {
  timeval tv{};
  tv.tv_sec = static_cast<time_t>(ms.count() / 1000);
  tv.tv_usec = static_cast<suseconds_t>((ms.count() % 1000) * 1000);
  return tv;
}

std::string bytes_text(amqp_bytes_t b) { return std::string(static_cast<const char*>(b.bytes), b.len); }

// "300 ms", "5 s": a timeout as an error says it.
std::string duration_words(std::chrono::milliseconds d) {
  if (d.count() < 1000 || d.count() % 1000 != 0) return std::to_string(d.count()) + " ms";
  return std::to_string(d.count() / 1000) + " s";
}

// How long a message of `bytes` may take on the wire: the timeout, plus a
// second per MiB (a large message arriving at a steady pace is progress).
std::chrono::milliseconds transfer_limit(std::chrono::milliseconds timeout, std::uint64_t bytes) {
  return timeout + std::chrono::seconds(bytes >> 20);
}

// What the broker says (a refusal's text, its version), as it goes into an
// error line: a claim of the server's, so at most 300 bytes, control
// characters as '?', and never the password (a hostile server may echo the
// login back).
std::string broker_text(amqp_bytes_t b, const std::string& password) {
  std::string s = bytes_text(b).substr(0, 300);
  for (char& c : s) {
    if (static_cast<unsigned char>(c) < 0x20 || c == 0x7f) c = '?';
  }
  if (!password.empty()) {
    for (auto at = s.find(password); at != std::string::npos; at = s.find(password, at + 3)) s.replace(at, password.size(), "***");
  }
  return s;
}

// A name as AMQP sends it (a short string: 1 to 255 bytes, no NUL, which
// rabbitmq-c's C strings would cut), or the usage error that says why not.
Status check_name(const std::string& what, const std::string& name) {
  if (name.empty() || name.size() > 255 || name.find('\0') != std::string::npos) {
    return Status::error(what + " must be 1 to 255 bytes without NUL", ErrorCode::kUsage);
  }
  return Status::ok();
}

// A vhost as a URL's path writes it: "/" is "%2f".
// `text` percent-encoded but for RFC 3986's unreserved bytes: a URL's user
// or vhost ("/" is %2f).
std::string url_encoded(const std::string& text) {
  std::string out;
  for (unsigned char c : text) {
    if (std::isalnum(c) || c == '-' || c == '_' || c == '.' || c == '~') {
      out += static_cast<char>(c);
    } else {
      static const char* kHex = "0123456789abcdef";
      out += '%';
      out += kHex[c >> 4];
      out += kHex[c & 15];
    }
  }
  return out;
}

// A TCP connection to host:port within `timeout`, non-blocking (as
// rabbitmq-c wants it), or why not. Made here, not by rabbitmq-c: its
// connect reports a refused port as "Operation now in progress" (it loses
// connect()'s errno).
Expected<int> connect_tcp(const std::string& host, int port, std::chrono::milliseconds timeout) {
  const auto deadline = std::chrono::steady_clock::now() + timeout;
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  addrinfo* found = nullptr;
  const int resolved = ::getaddrinfo(host.c_str(), std::to_string(port).c_str(), &hints, &found);
  if (resolved != 0) return Error{std::string("cannot resolve the host: ") + ::gai_strerror(resolved)};
  std::string why = "no address";
  for (const addrinfo* a = found; a != nullptr; a = a->ai_next) {
    const int fd = ::socket(a->ai_family, a->ai_socktype | SOCK_NONBLOCK | SOCK_CLOEXEC, a->ai_protocol);
    if (fd < 0) {
      why = std::strerror(errno);
      continue;
    }
    int error = ::connect(fd, a->ai_addr, a->ai_addrlen) == 0 ? 0 : errno;
    if (error == EINPROGRESS) {
      const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - std::chrono::steady_clock::now());
      pollfd p{fd, POLLOUT, 0};
      const int ready = left.count() > 0 ? ::poll(&p, 1, static_cast<int>(left.count())) : 0;
      socklen_t size = sizeof error;
      if (ready <= 0) {
        error = ETIMEDOUT;
      } else if (::getsockopt(fd, SOL_SOCKET, SO_ERROR, &error, &size) != 0) {
        error = errno;
      }
    }
    if (error == 0) {
      const int on = 1;
      ::setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &on, sizeof on);
      ::freeaddrinfo(found);
      return fd;
    }
    ::close(fd);
    why = error == ETIMEDOUT ? "no answer within " + std::to_string(timeout.count()) + " ms" : std::strerror(error);
  }
  ::freeaddrinfo(found);
  return Error{why};
}

std::string server_property(amqp_connection_state_t state, const char* key, const std::string& password) {
  const amqp_table_t* props = amqp_get_server_properties(state);
  if (props == nullptr) return "";
  for (int i = 0; i < props->num_entries; ++i) {
    const amqp_table_entry_t& e = props->entries[i];
    if (bytes_text(e.key) == key && (e.value.kind == AMQP_FIELD_KIND_UTF8 || e.value.kind == AMQP_FIELD_KIND_BYTES)) {
      return broker_text(e.value.value.bytes, password);
    }
  }
  return "";
}

// The last connection's id (AmqpConnection::id()): the process's count.
std::atomic<std::uint64_t> last_connection_id{0};

enum class Readable { kSocket, kWoken, kTimedOut };

// Waits until `socket` has something to read (or an error), `wake_fd`
// (when >= 0) became readable, or `deadline` passed; the wake first when
// both are ready (the caller has other work).
Readable wait_readable(int socket, int wake_fd, std::chrono::steady_clock::time_point deadline) {
  for (;;) {
    const auto left = std::chrono::ceil<std::chrono::milliseconds>(deadline - std::chrono::steady_clock::now());
    if (left.count() <= 0) return Readable::kTimedOut;
    pollfd fds[2] = {{socket, POLLIN, 0}, {wake_fd, POLLIN, 0}};
    const int ready = ::poll(fds, wake_fd >= 0 ? 2 : 1, static_cast<int>(std::min<std::int64_t>(left.count(), INT_MAX)));
    if (ready < 0 && errno == EINTR) continue;
    if (ready < 0) return Readable::kSocket;  // the read says what is wrong
    if (wake_fd >= 0 && fds[1].revents != 0) return Readable::kWoken;
    if (fds[0].revents != 0) return Readable::kSocket;
  }
}

// The properties pillbox reads of a message.
AmqpMessage message_of(std::uint64_t delivery_tag, const amqp_basic_properties_t& properties) {
  AmqpMessage m;
  m.delivery_tag = delivery_tag;
  if (properties._flags & AMQP_BASIC_MESSAGE_ID_FLAG) m.message_id = bytes_text(properties.message_id);
  if (properties._flags & AMQP_BASIC_CORRELATION_ID_FLAG) m.correlation_id = bytes_text(properties.correlation_id);
  if (properties._flags & AMQP_BASIC_REPLY_TO_FLAG) m.reply_to = bytes_text(properties.reply_to);
  if (properties._flags & AMQP_BASIC_HEADERS_FLAG) m.headers = table_from_amqp(properties.headers, &m.headers_cut);
  if (const AmqpValue* count = find_field(m.headers, "x-delivery-count"); count != nullptr) {
    // Any integer kind; one over int64 counts as the most there can be,
    // never as a first delivery.
    if (count->integer()) {
      m.delivery_count = std::max<std::int64_t>(*count->integer(), 0);
    } else if (std::holds_alternative<std::uint64_t>(count->value)) {
      m.delivery_count = std::numeric_limits<std::int64_t>::max();
    }
  }
  if (const AmqpValue* key = find_field(m.headers, "key"); key != nullptr && key->text() != nullptr) m.key = *key->text();
  if (const AmqpValue* reason = find_field(m.headers, "x-first-death-reason"); reason != nullptr && reason->text()) {
    m.first_death_reason = *reason->text();
  }
  return m;
}

}  // namespace

std::string AmqpAddress::describe() const {
  return "amqp://" + user + "@" + host + ":" + std::to_string(port) + "/" + url_encoded(vhost);
}

std::string AmqpAddress::url_without_password() const {
  const std::string h = host.find(':') != std::string::npos ? "[" + host + "]" : host;  // an IPv6 address
  return "amqp://" + url_encoded(user) + "@" + h + ":" + std::to_string(port) + "/" + url_encoded(vhost);
}

Expected<AmqpAddress> parse_amqp_url(std::string_view url) {
  const std::string given(url);
  if (given.rfind("amqps://", 0) == 0) {
    return Error::usage("amqps:// is not supported by this build (it connects without TLS): use amqp:// on a trusted "
                        "network, or a local TLS proxy");
  }
  // The URL is not echoed: it may hold a password.
  const char* shape = "the AMQP URL is not amqp://USER:PASS@HOST:PORT/VHOST (a vhost \"/\" is written %2f)";
  if (given.rfind("amqp://", 0) != 0 || given.find('\0') != std::string::npos || given.find("%00") != std::string::npos) {
    return Error::usage(shape);
  }
  std::string buffer = given;  // amqp_parse_url cuts it in place
  amqp_connection_info info{};
  amqp_default_connection_info(&info);
  if (amqp_parse_url(buffer.data(), &info) != AMQP_STATUS_OK || info.host == nullptr || *info.host == '\0' ||
      info.port <= 0 || info.port > 65535) {
    return Error::usage(shape);
  }
  // Decoded, a field may hold what the URL's text hid (%00 cuts it short
  // in C; %0a splits every error line that names the broker).
  for (const char* field : {info.user, info.password, info.host, info.vhost}) {
    for (const char* p = field; p != nullptr && *p != '\0'; ++p) {
      if (static_cast<unsigned char>(*p) < 0x20 || *p == 0x7f) return Error::usage(shape);
    }
  }
  AmqpAddress a;
  a.host = info.host;
  a.port = info.port;
  a.user = info.user;
  a.password = info.password;
  a.vhost = info.vhost;
  // USER:PASS in the authority's user part (what comes before its last '@').
  const std::string authority = given.substr(7, given.find('/', 7) == std::string::npos ? std::string::npos
                                                                                         : given.find('/', 7) - 7);
  const auto at = authority.rfind('@');
  a.password_in_url = at != std::string::npos && authority.substr(0, at).find(':') != std::string::npos;
  return a;
}

Expected<AmqpConnection> AmqpConnection::open(const AmqpAddress& address, std::chrono::milliseconds timeout) {
  const std::string where = "RabbitMQ at " + address.describe();
  amqp_connection_state_t state = amqp_new_connection();
  if (state == nullptr) return Error{"cannot reach " + where + ": out of memory"};
  AmqpConnection c(address, state);
  amqp_socket_t* socket = amqp_tcp_socket_new(state);
  if (socket == nullptr) return Error{"cannot reach " + where + ": cannot make a socket"};
  auto fd = connect_tcp(address.host, address.port, timeout);
  if (!fd) {
    c.close();
    return Error{"cannot reach " + where + ": " + fd.error() + " (is the broker running, and is the URL's host and port right?)"};
  }
  amqp_tcp_socket_set_sockfd(socket, *fd);  // rabbitmq-c owns it from here
  c.socket_.reset(::fcntl(*fd, F_DUPFD_CLOEXEC, 0));
  if (!c.socket_.valid()) {
    const std::string why = std::strerror(errno);
    c.close();
    return Error{"cannot reach " + where + ": cannot hold its socket (" + why + "): too many open files?"};
  }
  timeval tv = to_timeval(timeout);
  amqp_set_handshake_timeout(state, &tv);
  amqp_set_rpc_timeout(state, &tv);
  c.timeout_ = timeout;
  // No heartbeats: rabbitmq-c only answers them inside a call, and the
  // worker's own calls come often enough to be the sign of life.
  // What the client can hear, said at login: without consumer_cancel_notify
  // the broker drops a consume whose queue went away without a word, and
  // the worker would wait for ever.
  // connection.blocked: told when a memory or disk alarm blocks publishers,
  // so that a publish that waits can say why.
  amqp_table_entry_t capability[3] = {};
  capability[0].key = amqp_cstring_bytes("consumer_cancel_notify");
  capability[1].key = amqp_cstring_bytes("authentication_failure_close");
  capability[2].key = amqp_cstring_bytes("connection.blocked");
  for (amqp_table_entry_t& e : capability) {
    e.value.kind = AMQP_FIELD_KIND_BOOLEAN;
    e.value.value.boolean = 1;
  }
  amqp_table_entry_t property[2] = {};
  property[0].key = amqp_cstring_bytes("capabilities");
  property[0].value.kind = AMQP_FIELD_KIND_TABLE;
  property[0].value.value.table = amqp_table_t{3, capability};
  property[1].key = amqp_cstring_bytes("connection_name");  // shown in the broker's list of connections
  property[1].value.kind = AMQP_FIELD_KIND_UTF8;
  property[1].value.value.bytes = amqp_cstring_bytes("pillbox");
  const amqp_table_t properties{2, property};
  const amqp_rpc_reply_t login =
      amqp_login_with_properties(state, address.vhost.c_str(), 0, AMQP_DEFAULT_FRAME_SIZE, 0, &properties,
                                 AMQP_SASL_METHOD_PLAIN, address.user.c_str(), address.password.c_str());
  if (login.reply_type != AMQP_RESPONSE_NORMAL) {
    std::string why;
    if (login.reply_type == AMQP_RESPONSE_SERVER_EXCEPTION && login.reply.id == AMQP_CONNECTION_CLOSE_METHOD) {
      const auto* m = static_cast<const amqp_connection_close_t*>(login.reply.decoded);
      const std::string text = broker_text(m->reply_text, address.password);
      if (m->reply_code == AMQP_ACCESS_REFUSED) {
        why = "refused the login of user '" + address.user + "' (" + text + "): check the URL's user and password";
      } else if (m->reply_code == AMQP_NOT_ALLOWED) {
        why = "refused vhost '" + address.vhost + "' to user '" + address.user + "' (" + text +
              "): the vhost does not exist or the user has no permission on it (rabbitmqctl add_vhost, "
              "set_permissions), or the URL's path is wrong (\"/\" is written %2f)";
      } else {
        why = "closed the connection at login (" + text + ")";
      }
    } else if (login.reply_type == AMQP_RESPONSE_LIBRARY_EXCEPTION) {
      why = std::string("ended the login (") + amqp_error_string2(login.library_error) +
            "): a wrong user or password, or a server that does not speak AMQP 0-9-1 on this port";
    } else {
      why = "ended the connection at login";
    }
    c.close();
    return Error{where + " " + why};
  }
  c.server_version_ = server_property(state, "version", address.password);
  amqp_channel_open(state, c.channel_);
  if (auto ok = c.checked("open a channel"); !ok) return Error{ok.message()};
  return c;
}

AmqpConnection::AmqpConnection(AmqpAddress address, amqp_connection_state_t state)
    : address_(std::move(address)), id_(++last_connection_id), state_(state) {}

AmqpConnection::AmqpConnection(AmqpConnection&& other) noexcept { *this = std::move(other); }

AmqpConnection& AmqpConnection::operator=(AmqpConnection&& other) noexcept {
  if (this != &other) {
    close();
    address_ = std::move(other.address_);
    id_ = other.id_;
    state_ = std::exchange(other.state_, nullptr);
    socket_ = std::move(other.socket_);
    why_broken_ = std::move(other.why_broken_);
    channel_ = other.channel_;
    timeout_ = other.timeout_;
    server_version_ = std::move(other.server_version_);
    refusal_ = std::move(other.refusal_);
    confirms_ = std::move(other.confirms_);
    blocked_ = std::move(other.blocked_);
    consumer_tag_ = std::move(other.consumer_tag_);
    watchdog_ = std::move(other.watchdog_);
  }
  return *this;
}

AmqpConnection::~AmqpConnection() {
  if (state_ != nullptr) {
    amqp_channel_close(state_, channel_, AMQP_REPLY_SUCCESS);
    amqp_connection_close(state_, AMQP_REPLY_SUCCESS);
  }
  close();
}

void AmqpConnection::close() {
  if (state_ == nullptr) return;
  amqp_destroy_connection(state_);
  state_ = nullptr;
  // rabbitmq-c closed its descriptor; fd()'s keeps the socket open, so the
  // connection ends here.
  if (socket_.valid()) ::shutdown(socket_.get(), SHUT_RDWR);
}

std::string AmqpConnection::broke(std::string message) {
  close();
  if (why_broken_.empty()) why_broken_ = message;  // the first cause, not a later call's "lost before"
  return message;
}

Status AmqpConnection::checked(const std::string& what) {
  const std::string where = "RabbitMQ at " + address_.describe();
  if (state_ == nullptr) return Status::error(where + ": cannot " + what + ": the connection was lost before");
  const amqp_rpc_reply_t r = amqp_get_rpc_reply(state_);
  if (r.reply_type == AMQP_RESPONSE_NORMAL) return Status::ok();
  if (r.reply_type == AMQP_RESPONSE_SERVER_EXCEPTION && r.reply.id == AMQP_CHANNEL_CLOSE_METHOD) {
    const auto* m = static_cast<const amqp_channel_close_t*>(r.reply.decoded);
    refusal_ = AmqpRefusal{m->reply_code, broker_text(m->reply_text, address_.password)};
    // The channel is gone; the connection is not: a new one on the same number.
    amqp_channel_close_ok_t close_ok{};
    amqp_send_method(state_, channel_, AMQP_CHANNEL_CLOSE_OK_METHOD, &close_ok);
    amqp_channel_open(state_, channel_);
    if (amqp_get_rpc_reply(state_).reply_type != AMQP_RESPONSE_NORMAL) close();
    // A new channel starts without confirms and counts its tags from 1:
    // what was unconfirmed on the old one is the refusal's to tell.
    if (state_ != nullptr && confirms_.on) {
      confirms_ = Confirms{};
      amqp_confirm_select(state_, channel_);
      if (amqp_get_rpc_reply(state_).reply_type == AMQP_RESPONSE_NORMAL) {
        confirms_.on = true;
      } else {
        close();
      }
    }
    std::string message = where + " refused to " + what + ": " + refusal_->text;
    // The channel could not be opened again: the connection is gone with it.
    if (state_ == nullptr && why_broken_.empty()) why_broken_ = message;
    return Status::error(std::move(message));
  }
  if (r.reply_type == AMQP_RESPONSE_SERVER_EXCEPTION && r.reply.id == AMQP_CONNECTION_CLOSE_METHOD) {
    const auto* m = static_cast<const amqp_connection_close_t*>(r.reply.decoded);
    refusal_ = AmqpRefusal{m->reply_code, broker_text(m->reply_text, address_.password)};
    amqp_connection_close_ok_t close_ok{};
    amqp_send_method(state_, 0, AMQP_CONNECTION_CLOSE_OK_METHOD, &close_ok);
    return Status::error(broke(where + " closed the connection when asked to " + what + ": " + refusal_->text));
  }
  const std::string why = r.reply_type == AMQP_RESPONSE_LIBRARY_EXCEPTION ? amqp_error_string2(r.library_error)
                                                                          : "the connection ended";
  return Status::error(broke(where + ": cannot " + what + ": " + why));
}

Expected<AmqpQueueState> AmqpConnection::declare_queue(const std::string& name,
                                                       const std::vector<AmqpField>& arguments) {
  refusal_.reset();
  if (auto ok = check_name("a queue name", name); !ok) return Error{ok.message(), ok.code()};
  if (state_ == nullptr) return Error{checked("declare queue '" + name + "'").message()};
  AmqpTableEncoder encoder;
  const amqp_queue_declare_ok_t* ok = amqp_queue_declare(state_, channel_, amqp_cstring_bytes(name.c_str()), 0, 1, 0, 0,
                                                         encoder.encode(arguments));
  if (auto s = checked("declare queue '" + name + "'"); !s) return Error{s.message()};
  return AmqpQueueState{ok->message_count, ok->consumer_count};
}

Expected<AmqpQueueState> AmqpConnection::check_queue(const std::string& name) {
  refusal_.reset();
  if (auto ok = check_name("a queue name", name); !ok) return Error{ok.message(), ok.code()};
  if (state_ == nullptr) return Error{checked("find queue '" + name + "'").message()};
  const amqp_queue_declare_ok_t* ok =
      amqp_queue_declare(state_, channel_, amqp_cstring_bytes(name.c_str()), 1, 0, 0, 0, amqp_empty_table);
  if (auto s = checked("find queue '" + name + "'"); !s) return Error{s.message()};
  return AmqpQueueState{ok->message_count, ok->consumer_count};
}

Status AmqpConnection::declare_exclusive_queue(const std::string& name) {
  refusal_.reset();
  if (auto ok = check_name("a queue name", name); !ok) return ok;
  if (state_ == nullptr) return checked("declare queue '" + name + "'");
  // Not durable, exclusive, auto-deleted: the broker deletes it when this
  // connection ends, however it ends.
  amqp_queue_declare(state_, channel_, amqp_cstring_bytes(name.c_str()), 0, 0, 1, 1, amqp_empty_table);
  return checked("declare queue '" + name + "'");
}

Status AmqpConnection::declare_exchange(const std::string& name, const std::string& type) {
  refusal_.reset();
  if (auto ok = check_name("an exchange name", name); !ok) return ok;
  if (state_ == nullptr) return checked("declare exchange '" + name + "'");
  amqp_exchange_declare(state_, channel_, amqp_cstring_bytes(name.c_str()), amqp_cstring_bytes(type.c_str()), 0, 1, 0,
                        0, amqp_empty_table);
  return checked("declare exchange '" + name + "'");
}

Status AmqpConnection::bind_queue(const std::string& queue, const std::string& exchange, const std::string& routing_key) {
  refusal_.reset();
  if (auto ok = check_name("a queue name", queue); !ok) return ok;
  if (auto ok = check_name("an exchange name", exchange); !ok) return ok;
  const std::string what = "bind queue '" + queue + "' to exchange '" + exchange + "'";
  if (state_ == nullptr) return checked(what);
  amqp_queue_bind(state_, channel_, amqp_cstring_bytes(queue.c_str()), amqp_cstring_bytes(exchange.c_str()),
                  amqp_cstring_bytes(routing_key.c_str()), amqp_empty_table);
  return checked(what);
}

Status AmqpConnection::delete_queue(const std::string& name) {
  refusal_.reset();
  if (auto ok = check_name("a queue name", name); !ok) return ok;
  if (state_ == nullptr) return checked("delete queue '" + name + "'");
  amqp_queue_delete(state_, channel_, amqp_cstring_bytes(name.c_str()), 0, 0);
  return checked("delete queue '" + name + "'");
}

Status AmqpConnection::delete_exchange(const std::string& name) {
  refusal_.reset();
  if (auto ok = check_name("an exchange name", name); !ok) return ok;
  if (state_ == nullptr) return checked("delete exchange '" + name + "'");
  amqp_exchange_delete(state_, channel_, amqp_cstring_bytes(name.c_str()), 0);
  return checked("delete exchange '" + name + "'");
}

Status AmqpConnection::confirm_publishes() {
  refusal_.reset();
  if (state_ == nullptr) return checked("turn publisher confirms on");
  // Once on, a channel stays so and the broker's tags go on: counting
  // again from 0 here would leave every later confirm unheard.
  if (confirms_.on) return Status::ok();
  amqp_confirm_select(state_, channel_);
  if (auto s = checked("turn publisher confirms on"); !s) return s;
  confirms_ = Confirms{};
  confirms_.on = true;
  return Status::ok();
}

Status AmqpConnection::publish(const std::string& queue, const AmqpOutgoing& message) {
  if (auto ok = check_name("a queue name", queue); !ok) return ok;
  return publish_to("", queue, message, "publish to queue '" + queue + "'");
}

Status AmqpConnection::publish_to_exchange(const std::string& exchange, const AmqpOutgoing& message) {
  if (auto ok = check_name("an exchange name", exchange); !ok) return ok;
  return publish_to(exchange, "", message, "publish to exchange '" + exchange + "'");
}

Status AmqpConnection::publish_to(const std::string& exchange, const std::string& routing_key,
                                  const AmqpOutgoing& message, const std::string& what) {
  refusal_.reset();
  for (const auto& [property, value] : {std::pair{"a message id", &message.message_id},
                                        std::pair{"a correlation id", &message.correlation_id},
                                        std::pair{"a reply-to", &message.reply_to}}) {
    if (value->empty()) continue;
    if (auto ok = check_name(property, *value); !ok) return ok;
  }
  for (const AmqpField& h : message.headers) {
    if (auto ok = check_name("a header name", h.name); !ok) return ok;
  }
  if (state_ == nullptr) return checked(what);
  // A message's properties and headers go in one content-header frame.
  // rabbitmq-c sends the publish method before it finds that they do not
  // fit, which leaves the channel mid-message: said here, before anything
  // is sent, and the connection stays usable (a usage error: this message
  // can never be sent, whatever the broker's state).
  std::size_t header_frame = 8 + 14 + 64 + message.message_id.size() + message.correlation_id.size() +
                             message.reply_to.size() + 4;
  for (const AmqpField& h : message.headers) header_frame += wire_size(h);
  const auto frame_max = static_cast<std::size_t>(amqp_get_frame_max(state_));
  if (frame_max > 0 && header_frame > frame_max) {
    return Status::error("RabbitMQ at " + address_.describe() + ": cannot " + what + ": its properties and headers take " +
                             std::to_string(header_frame) + " bytes, over the " + std::to_string(frame_max) +
                             " one AMQP frame carries",
                         ErrorCode::kUsage);
  }
  amqp_basic_properties_t props{};
  props._flags = AMQP_BASIC_DELIVERY_MODE_FLAG;
  props.delivery_mode = 2;  // persistent
  auto set = [&props](amqp_flags_t flag, amqp_bytes_t& field, const std::string& value) {
    if (value.empty()) return;
    props._flags |= flag;
    field = amqp_cstring_bytes(value.c_str());
  };
  set(AMQP_BASIC_MESSAGE_ID_FLAG, props.message_id, message.message_id);
  set(AMQP_BASIC_CORRELATION_ID_FLAG, props.correlation_id, message.correlation_id);
  set(AMQP_BASIC_REPLY_TO_FLAG, props.reply_to, message.reply_to);
  AmqpTableEncoder encoder;
  if (!message.headers.empty()) {
    props._flags |= AMQP_BASIC_HEADERS_FLAG;
    props.headers = encoder.encode(message.headers);
  }
  amqp_bytes_t bytes{message.body.size(), const_cast<char*>(message.body.data())};
  if (!watchdog_) watchdog_ = std::make_unique<SocketWatchdog>();
  const auto limit = transfer_limit(timeout_, message.body.size());
  watchdog_->arm(amqp_get_sockfd(state_), limit);
  const int rc = amqp_basic_publish(state_, channel_, amqp_cstring_bytes(exchange.c_str()),
                                    amqp_cstring_bytes(routing_key.c_str()),
                                    confirms_.on ? 1 : 0, 0, &props, bytes);
  const bool expired = watchdog_->disarm();
  if (rc != AMQP_STATUS_OK) {
    std::string why = amqp_error_string2(rc);
    if (expired) {
      why = "the broker did not take the message within " + duration_words(limit) +
            (blocked_.empty() ? std::string(" (is a memory or disk alarm blocking publishers? rabbitmqctl status)")
                              : " (it blocks publishers: " + blocked_ + ")");
    }
    return Status::error(broke("RabbitMQ at " + address_.describe() + ": cannot " + what + ": " + why));
  }
  if (confirms_.on) ++confirms_.published;
  return Status::ok();
}

Status AmqpConnection::wait_confirmed() {
  refusal_.reset();
  const std::string where = "RabbitMQ at " + address_.describe();
  if (state_ == nullptr) return checked("wait for publisher confirms");
  if (!confirms_.on) return Status::error(where + ": publisher confirms are not on (confirm_publishes)");
  // The deadline moves with each new confirm: a large batch confirmed
  // slowly is progress; the broker saying nothing new for the timeout is
  // not, however many other frames it sends (checked after each, and a
  // watchdog over each wait: rabbitmq-c's own loop swallows heartbeats).
  last_wait_ = LastWait{confirms_.published - confirms_.confirmed - confirms_.ahead.size(), 0};
  auto deadline = std::chrono::steady_clock::now() + timeout_;
  amqp_frame_t frame{};
  while (confirms_.confirmed < confirms_.published) {
    amqp_maybe_release_buffers(state_);
    const int got = wait_frame(frame, deadline);
    if (got == AMQP_STATUS_TIMEOUT) {
      const std::uint64_t waiting = confirms_.published - confirms_.confirmed - confirms_.ahead.size();
      return Status::error(broke(where + " did not confirm " + std::to_string(waiting) + " message" +
                                 (waiting == 1 ? "" : "s") + " within " + duration_words(timeout_) +
                                 (blocked_.empty() ? std::string() : " (it blocks publishers: " + blocked_ + ")") +
                                 "; they may or may not be in the queue"));
    }
    if (got != AMQP_STATUS_OK) {
      return Status::error(broke(where + ": cannot wait for publisher confirms: " + amqp_error_string2(got)));
    }
    if (frame.frame_type != AMQP_FRAME_METHOD) continue;  // a returned message's content: read below
    const amqp_method_number_t method = frame.payload.method.id;
    const void* decoded = frame.payload.method.decoded;
    if (method == AMQP_BASIC_ACK_METHOD || method == AMQP_BASIC_NACK_METHOD) {
      const bool ack = method == AMQP_BASIC_ACK_METHOD;
      const std::uint64_t tag = ack ? static_cast<const amqp_basic_ack_t*>(decoded)->delivery_tag
                                    : static_cast<const amqp_basic_nack_t*>(decoded)->delivery_tag;
      const bool multiple = ack ? static_cast<const amqp_basic_ack_t*>(decoded)->multiple != 0
                                : static_cast<const amqp_basic_nack_t*>(decoded)->multiple != 0;
      // A claim of the broker's: only tags published and not yet confirmed
      // count, each once, in whatever order they come.
      if (tag <= confirms_.confirmed || tag > confirms_.published) continue;
      auto& ahead = confirms_.ahead;
      std::uint64_t count = 0;
      if (multiple) {
        count = tag - confirms_.confirmed;
        for (auto it = ahead.begin(); it != ahead.end() && *it <= tag; it = ahead.erase(it)) --count;
        confirms_.confirmed = tag;
      } else if (ahead.insert(tag).second) {
        count = 1;
      }
      while (!ahead.empty() && *ahead.begin() == confirms_.confirmed + 1) {
        confirms_.confirmed = *ahead.begin();
        ahead.erase(ahead.begin());
      }
      if (!ack) confirms_.refused += count;
      if (count > 0) deadline = std::chrono::steady_clock::now() + timeout_;
      continue;
    }
    if (method == AMQP_BASIC_RETURN_METHOD) {
      const auto* r = static_cast<const amqp_basic_return_t*>(decoded);
      if (confirms_.returned++ == 0) confirms_.return_text = broker_text(r->reply_text, address_.password);
      // Its header and body follow: read and dropped (bounded, with a deadline).
      if (auto content = read_content(0, "a returned message", false); !content) return Status::error(content.error());
      // Its ack comes next: progress, as long as there are as many
      // messages unconfirmed (a flood of returns is not).
      if (confirms_.returned <= confirms_.published - confirms_.confirmed) {
        deadline = std::chrono::steady_clock::now() + timeout_;
      }
      continue;
    }
    if (method == AMQP_CONNECTION_BLOCKED_METHOD) {
      blocked_ = broker_text(static_cast<const amqp_connection_blocked_t*>(decoded)->reason, address_.password);
      continue;
    }
    if (method == AMQP_CONNECTION_UNBLOCKED_METHOD) {
      blocked_.clear();
      continue;
    }
    if (method == AMQP_CHANNEL_CLOSE_METHOD) {
      const auto* m = static_cast<const amqp_channel_close_t*>(decoded);
      refusal_ = AmqpRefusal{m->reply_code, broker_text(m->reply_text, address_.password)};
    } else if (method == AMQP_CONNECTION_CLOSE_METHOD) {
      const auto* m = static_cast<const amqp_connection_close_t*>(decoded);
      refusal_ = AmqpRefusal{m->reply_code, broker_text(m->reply_text, address_.password)};
    }
    return Status::error(broke(refusal_ ? where + " refused a message it was sent: " + refusal_->text
                                        : where + ": an unexpected frame while waiting for publisher confirms"));
  }
  const std::uint64_t refused = std::exchange(confirms_.refused, 0);
  const std::uint64_t returned = std::exchange(confirms_.returned, 0);
  last_wait_.refused = refused;
  if (returned > 0) {
    return Status::error(where + " could not route " + std::to_string(returned) + " message" +
                         (returned == 1 ? "" : "s") + " to a queue (" + confirms_.return_text +
                         "): the queue does not exist (was it deleted?)");
  }
  if (refused > 0) {
    return Status::error(where + " refused " + std::to_string(refused) + " message" + (refused == 1 ? "" : "s") +
                         " (basic.nack): the queue is full (x-max-length with x-overflow reject-publish), or a "
                         "quorum queue has no leader (too few of its nodes are up)");
  }
  return Status::ok();
}

Expected<std::optional<AmqpMessage>> AmqpConnection::get(const std::string& queue) {
  refusal_.reset();
  if (auto ok = check_name("a queue name", queue); !ok) return Error{ok.message(), ok.code()};
  const std::string what = "get from queue '" + queue + "'";
  if (state_ == nullptr) return Error{checked(what).message()};
  const amqp_rpc_reply_t r = amqp_basic_get(state_, channel_, amqp_cstring_bytes(queue.c_str()), 0);
  if (auto s = checked(what); !s) return Error{s.message()};
  if (r.reply.id == AMQP_BASIC_GET_EMPTY_METHOD) return std::optional<AmqpMessage>{};
  const std::uint64_t tag = static_cast<const amqp_basic_get_ok_t*>(r.reply.decoded)->delivery_tag;
  auto m = read_content(tag, "queue '" + queue + "'");
  if (!m) return Error{m.error()};
  return std::optional<AmqpMessage>{std::move(*m)};
}

Status AmqpConnection::consume(const std::string& queue, std::uint16_t prefetch,
                               const std::vector<AmqpField>& arguments) {
  refusal_.reset();
  if (auto ok = check_name("a queue name", queue); !ok) return ok;
  const std::string what = "consume queue '" + queue + "'";
  if (state_ == nullptr) return checked(what);
  amqp_basic_qos(state_, channel_, 0, prefetch, 0);
  if (auto s = checked(what); !s) return s;
  AmqpTableEncoder encoder;
  const amqp_basic_consume_ok_t* ok = amqp_basic_consume(state_, channel_, amqp_cstring_bytes(queue.c_str()),
                                                         amqp_empty_bytes, 0, 0, 0, encoder.encode(arguments));
  if (auto s = checked(what); !s) return s;
  if (ok != nullptr) consumer_tag_ = bytes_text(ok->consumer_tag);
  return Status::ok();
}

Expected<std::vector<AmqpMessage>> AmqpConnection::cancel_consume() {
  refusal_.reset();
  const std::string what = "cancel the consume";
  if (state_ == nullptr) return Error{checked(what).message()};
  std::vector<AmqpMessage> delivered;
  if (consumer_tag_.empty()) return delivered;
  const std::string where = "RabbitMQ at " + address_.describe();
  amqp_basic_cancel_t cancel{};
  cancel.consumer_tag = amqp_bytes_t{consumer_tag_.size(), consumer_tag_.data()};
  if (const int rc = amqp_send_method(state_, channel_, AMQP_BASIC_CANCEL_METHOD, &cancel); rc != AMQP_STATUS_OK) {
    return Error{broke(where + ": cannot " + what + ": " + amqp_error_string2(rc))};
  }
  // Until cancel-ok, the broker may still deliver (what it sent before it
  // read the cancel): those are this consumer's, unacknowledged, and go to
  // the caller. rabbitmq-c's own RPC would keep them queued where no
  // deadline bounds their content; here each is read as next() reads one.
  const auto deadline = std::chrono::steady_clock::now() + timeout_;
  for (;;) {
    amqp_frame_t frame{};
    const int got = wait_frame(frame, deadline);
    if (got != AMQP_STATUS_OK) {
      return Error{broke(where + ": no answer to cancelling the consume: " +
                         (got == AMQP_STATUS_TIMEOUT ? std::string("none within the timeout") : amqp_error_string2(got)))};
    }
    const amqp_method_number_t method = frame.frame_type == AMQP_FRAME_METHOD ? frame.payload.method.id : 0;
    if (method == AMQP_BASIC_CANCEL_OK_METHOD || method == AMQP_BASIC_CANCEL_METHOD) {
      // (A broker's own cancel crossing ours ends the consume all the same.)
      consumer_tag_.clear();
      if (method == AMQP_BASIC_CANCEL_OK_METHOD) return delivered;
      continue;
    }
    if (method == AMQP_BASIC_DELIVER_METHOD) {
      const std::uint64_t tag = static_cast<const amqp_basic_deliver_t*>(frame.payload.method.decoded)->delivery_tag;
      auto m = read_content(tag, "a delivery");
      if (!m) return Error{m.error()};
      delivered.push_back(std::move(*m));
      continue;
    }
    if (method == AMQP_CONNECTION_BLOCKED_METHOD) {
      blocked_ = broker_text(static_cast<const amqp_connection_blocked_t*>(frame.payload.method.decoded)->reason,
                             address_.password);
      continue;
    }
    if (method == AMQP_CONNECTION_UNBLOCKED_METHOD) {
      blocked_.clear();
      continue;
    }
    return Error{broke(where + ": an unexpected frame while cancelling the consume")};
  }
}

Expected<std::optional<AmqpMessage>> AmqpConnection::next(std::chrono::milliseconds timeout, int wake_fd) {
  refusal_.reset();
  if (state_ == nullptr) return Error{checked("wait for a message").message()};
  const auto deadline = std::chrono::steady_clock::now() + timeout;
  const std::string where = "RabbitMQ at " + address_.describe();
  amqp_frame_t frame{};
  for (;;) {
    amqp_maybe_release_buffers(state_);
    // What rabbitmq-c has read already (a delivery that came while another
    // call waited for its reply, or more frames than the last read needed)
    // is not on the socket any more: poll() would not see it, and a message
    // that is here would wait for the timeout.
    if (!amqp_frames_enqueued(state_) && !amqp_data_in_buffer(state_) &&
        wait_readable(amqp_get_sockfd(state_), wake_fd, deadline) != Readable::kSocket) {
      return std::optional<AmqpMessage>{};
    }
    const int got = wait_frame(frame, deadline);
    if (got == AMQP_STATUS_TIMEOUT) return std::optional<AmqpMessage>{};
    if (got != AMQP_STATUS_OK) return Error{broke(where + ": cannot wait for a message: " + amqp_error_string2(got))};
    const amqp_method_number_t method = frame.frame_type == AMQP_FRAME_METHOD ? frame.payload.method.id : 0;
    if (method == AMQP_BASIC_DELIVER_METHOD) {
      const std::uint64_t tag = static_cast<const amqp_basic_deliver_t*>(frame.payload.method.decoded)->delivery_tag;
      auto m = read_content(tag, "a delivery");
      if (!m) return Error{m.error()};
      return std::optional<AmqpMessage>{std::move(*m)};
    }
    if (method == AMQP_BASIC_CANCEL_METHOD) {
      // The queue went away (deleted, or its leader lost): nothing more will
      // come on this consume.
      return Error{where + " cancelled the consume (the queue was deleted or moved); consume again"};
    }
    // A memory or disk alarm blocks this connection's publishes: news for
    // a publish that waits, not the end of the consume.
    if (method == AMQP_CONNECTION_BLOCKED_METHOD) {
      blocked_ = broker_text(static_cast<const amqp_connection_blocked_t*>(frame.payload.method.decoded)->reason,
                             address_.password);
      continue;
    }
    if (method == AMQP_CONNECTION_UNBLOCKED_METHOD) {
      blocked_.clear();
      continue;
    }
    if (method == AMQP_CHANNEL_CLOSE_METHOD) {
      const auto* m = static_cast<const amqp_channel_close_t*>(frame.payload.method.decoded);
      refusal_ = AmqpRefusal{m->reply_code, broker_text(m->reply_text, address_.password)};
    } else if (method == AMQP_CONNECTION_CLOSE_METHOD) {
      const auto* m = static_cast<const amqp_connection_close_t*>(frame.payload.method.decoded);
      refusal_ = AmqpRefusal{m->reply_code, broker_text(m->reply_text, address_.password)};
    }
    // The consume is gone with its channel or connection, and any other
    // frame here means the frames are out of step: the caller connects again.
    return Error{broke(refusal_ ? where + " ended the consume: " + refusal_->text
                                : where + ": an unexpected frame instead of a message")};
  }
}

int AmqpConnection::wait_frame(amqp_frame_t& frame, std::chrono::steady_clock::time_point deadline) {
  const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - std::chrono::steady_clock::now());
  if (left <= std::chrono::milliseconds(0)) return AMQP_STATUS_TIMEOUT;
  timeval tv = to_timeval(left);
  if (!watchdog_) watchdog_ = std::make_unique<SocketWatchdog>();
  watchdog_->arm(amqp_get_sockfd(state_), left + std::chrono::milliseconds(100));
  const int got = amqp_simple_wait_frame_noblock(state_, &frame, &tv);
  return watchdog_->disarm() ? AMQP_STATUS_TIMEOUT : got;
}

Expected<AmqpMessage> AmqpConnection::read_content(std::uint64_t delivery_tag, const std::string& of, bool keep_body) {
  // rabbitmq-c's own reader waits for a message's content without a
  // deadline: a broker that stops mid-message would hang the worker. Here
  // each frame has the timeout, and the whole body the timeout plus a
  // second per MiB it announced.
  const std::string where = "RabbitMQ at " + address_.describe();
  auto deadline = std::chrono::steady_clock::now() + timeout_;
  amqp_frame_t frame{};
  // Each frame within the timeout, and the whole within `deadline`.
  auto wait = [&]() { return wait_frame(frame, std::min(deadline, std::chrono::steady_clock::now() + timeout_)); };
  auto broken = [&](const std::string& why) -> Error {
    // Mid-message, the connection's frames are out of step: it ends.
    return Error{broke(where + ": cannot read " + of + ": " + why)};
  };
  int got = wait();
  if (got != AMQP_STATUS_OK) return broken(amqp_error_string2(got));
  if (frame.frame_type != AMQP_FRAME_HEADER || frame.channel != channel_) return broken("the broker sent something else");
  // Another class's header decodes to another struct: read as basic's, its
  // flags would point past it (an attack crashed the worker so).
  if (frame.payload.properties.class_id != AMQP_BASIC_CLASS) return broken("the broker sent a header of another class");
  const std::uint64_t size = frame.payload.properties.body_size;
  if (size > kMaxPayloadBytes) {
    return broken("its body is " + std::to_string(size) + " bytes, over the " +
                  std::to_string(kMaxPayloadBytes >> 20) + " MiB a payload may have");
  }
  AmqpMessage m =
      message_of(delivery_tag, *static_cast<const amqp_basic_properties_t*>(frame.payload.properties.decoded));
  deadline = std::chrono::steady_clock::now() + transfer_limit(timeout_, size);
  m.body_size = size;
  if (keep_body && size > kept_body_bytes_) {
    keep_body = false;
    m.body_omitted = true;
  }
  // What the header announces is a claim: the buffer grows with what comes.
  if (keep_body) m.body.reserve(std::min<std::uint64_t>(size, 1u << 20));
  std::uint64_t received = 0;
  Sha256 omitted;
  while (received < size) {
    got = wait();
    if (got != AMQP_STATUS_OK) return broken(amqp_error_string2(got));
    if (frame.frame_type != AMQP_FRAME_BODY || frame.channel != channel_) return broken("the broker sent something else");
    received += frame.payload.body_fragment.len;
    if (received > size) break;
    if (keep_body) {
      m.body += bytes_text(frame.payload.body_fragment);
    } else if (m.body_omitted) {
      omitted.update(frame.payload.body_fragment.bytes, frame.payload.body_fragment.len);
    }
  }
  if (received != size) return broken("its body is longer than its header said");
  if (m.body_omitted) m.omitted_body_sha256 = digest_hex(omitted.finish());
  return m;
}

Status AmqpConnection::ack(std::uint64_t delivery_tag) {
  refusal_.reset();
  if (state_ == nullptr) return checked("acknowledge a message");
  const int rc = amqp_basic_ack(state_, channel_, delivery_tag, 0);
  if (rc != AMQP_STATUS_OK) {
    return Status::error(
        broke("RabbitMQ at " + address_.describe() + ": cannot acknowledge a message: " + amqp_error_string2(rc)));
  }
  return Status::ok();
}

Status AmqpConnection::reject(std::uint64_t delivery_tag, bool requeue) {
  refusal_.reset();
  if (state_ == nullptr) return checked("reject a message");
  const int rc = amqp_basic_reject(state_, channel_, delivery_tag, requeue ? 1 : 0);
  if (rc != AMQP_STATUS_OK) {
    return Status::error(
        broke("RabbitMQ at " + address_.describe() + ": cannot reject a message: " + amqp_error_string2(rc)));
  }
  return Status::ok();
}

}  // namespace pillbox::broker
