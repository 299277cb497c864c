#include "supervisor/broker/amqp_connection.h"

#include "shared/task_input.h"

#include <amqp_tcp_socket.h>
#include <sys/time.h>

#include <algorithm>
#include <cctype>
#include <cerrno>
#include <cstring>
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
std::string encode_vhost(const std::string& vhost) {
  std::string out;
  for (unsigned char c : vhost) {
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

// The x-arguments as rabbitmq-c's table; `entries` owns the table's array,
// the names and strings stay in `arguments`.
amqp_table_t table_of(const std::vector<AmqpArgument>& arguments, std::vector<amqp_table_entry_t>& entries) {
  entries.clear();
  for (const AmqpArgument& a : arguments) {
    amqp_table_entry_t e{};
    e.key = amqp_cstring_bytes(a.name.c_str());
    if (const auto* s = std::get_if<std::string>(&a.value)) {
      e.value.kind = AMQP_FIELD_KIND_UTF8;
      e.value.value.bytes = amqp_cstring_bytes(s->c_str());
    } else {
      e.value.kind = AMQP_FIELD_KIND_I64;
      e.value.value.i64 = std::get<std::int64_t>(a.value);
    }
    entries.push_back(e);
  }
  amqp_table_t t{};
  t.num_entries = static_cast<int>(entries.size());
  t.entries = entries.empty() ? nullptr : entries.data();
  return t;
}

// The properties pillbox reads of a message.
AmqpMessage message_of(std::uint64_t delivery_tag, const amqp_basic_properties_t& properties) {
  AmqpMessage m;
  m.delivery_tag = delivery_tag;
  if (properties._flags & AMQP_BASIC_MESSAGE_ID_FLAG) m.message_id = bytes_text(properties.message_id);
  if (properties._flags & AMQP_BASIC_HEADERS_FLAG) {
    const amqp_table_t& h = properties.headers;
    for (int i = 0; i < h.num_entries; ++i) {
      const std::string key = bytes_text(h.entries[i].key);
      const amqp_field_value_t& v = h.entries[i].value;
      if (key == "x-delivery-count") {
        if (v.kind == AMQP_FIELD_KIND_I64) m.delivery_count = v.value.i64;
        if (v.kind == AMQP_FIELD_KIND_I32) m.delivery_count = v.value.i32;
        if (v.kind == AMQP_FIELD_KIND_U32) m.delivery_count = v.value.u32;
      } else if (key == "x-first-death-reason" && (v.kind == AMQP_FIELD_KIND_UTF8 || v.kind == AMQP_FIELD_KIND_BYTES)) {
        m.first_death_reason = bytes_text(v.value.bytes);
      }
    }
  }
  return m;
}

}  // namespace

std::string AmqpAddress::describe() const {
  return "amqp://" + user + "@" + host + ":" + std::to_string(port) + "/" + encode_vhost(vhost);
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
  return a;
}

Expected<AmqpConnection> AmqpConnection::open(const AmqpAddress& address, std::chrono::milliseconds timeout) {
  const std::string where = "RabbitMQ at " + address.describe();
  amqp_connection_state_t state = amqp_new_connection();
  if (state == nullptr) return Error{"cannot reach " + where + ": out of memory"};
  AmqpConnection c(address, state);
  amqp_socket_t* socket = amqp_tcp_socket_new(state);
  if (socket == nullptr) return Error{"cannot reach " + where + ": cannot make a socket"};
  timeval tv = to_timeval(timeout);
  errno = 0;
  const int opened = amqp_socket_open_noblock(socket, address.host.c_str(), address.port, &tv);
  if (opened != AMQP_STATUS_OK) {
    const int e = errno;
    std::string why = amqp_error_string2(opened);
    if (opened == AMQP_STATUS_SOCKET_ERROR && e != 0) why = std::strerror(e);
    c.close();
    return Error{"cannot reach " + where + ": " + why + " (is the broker running, and is the URL's host and port right?)"};
  }
  amqp_set_handshake_timeout(state, &tv);
  amqp_set_rpc_timeout(state, &tv);
  c.timeout_ = timeout;
  // No heartbeats: rabbitmq-c only answers them inside a call, and the
  // worker's own calls come often enough to be the sign of life.
  // What the client can hear, said at login: without consumer_cancel_notify
  // the broker drops a consume whose queue went away without a word, and
  // the worker would wait for ever.
  amqp_table_entry_t capability[2] = {};
  capability[0].key = amqp_cstring_bytes("consumer_cancel_notify");
  capability[1].key = amqp_cstring_bytes("authentication_failure_close");
  for (amqp_table_entry_t& e : capability) {
    e.value.kind = AMQP_FIELD_KIND_BOOLEAN;
    e.value.value.boolean = 1;
  }
  amqp_table_entry_t property[2] = {};
  property[0].key = amqp_cstring_bytes("capabilities");
  property[0].value.kind = AMQP_FIELD_KIND_TABLE;
  property[0].value.value.table = amqp_table_t{2, capability};
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

AmqpConnection::AmqpConnection(AmqpConnection&& other) noexcept
    : address_(std::move(other.address_)),
      state_(std::exchange(other.state_, nullptr)),
      channel_(other.channel_),
      timeout_(other.timeout_),
      server_version_(std::move(other.server_version_)),
      refusal_(std::move(other.refusal_)) {}

AmqpConnection& AmqpConnection::operator=(AmqpConnection&& other) noexcept {
  if (this != &other) {
    close();
    address_ = std::move(other.address_);
    state_ = std::exchange(other.state_, nullptr);
    channel_ = other.channel_;
    timeout_ = other.timeout_;
    server_version_ = std::move(other.server_version_);
    refusal_ = std::move(other.refusal_);
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
    return Status::error(where + " refused to " + what + ": " + refusal_->text);
  }
  if (r.reply_type == AMQP_RESPONSE_SERVER_EXCEPTION && r.reply.id == AMQP_CONNECTION_CLOSE_METHOD) {
    const auto* m = static_cast<const amqp_connection_close_t*>(r.reply.decoded);
    refusal_ = AmqpRefusal{m->reply_code, broker_text(m->reply_text, address_.password)};
    amqp_connection_close_ok_t close_ok{};
    amqp_send_method(state_, 0, AMQP_CONNECTION_CLOSE_OK_METHOD, &close_ok);
    close();
    return Status::error(where + " closed the connection when asked to " + what + ": " + refusal_->text);
  }
  const std::string why = r.reply_type == AMQP_RESPONSE_LIBRARY_EXCEPTION ? amqp_error_string2(r.library_error)
                                                                          : "the connection ended";
  close();
  return Status::error(where + ": cannot " + what + ": " + why);
}

Expected<AmqpQueueState> AmqpConnection::declare_queue(const std::string& name,
                                                       const std::vector<AmqpArgument>& arguments) {
  refusal_.reset();
  if (auto ok = check_name("a queue name", name); !ok) return Error{ok.message(), ok.code()};
  if (state_ == nullptr) return Error{checked("declare queue '" + name + "'").message()};
  std::vector<amqp_table_entry_t> entries;
  const amqp_queue_declare_ok_t* ok = amqp_queue_declare(state_, channel_, amqp_cstring_bytes(name.c_str()), 0, 1, 0, 0,
                                                         table_of(arguments, entries));
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

Status AmqpConnection::publish(const std::string& queue, std::string_view body, const std::string& message_id) {
  refusal_.reset();
  if (auto ok = check_name("a queue name", queue); !ok) return ok;
  if (!message_id.empty()) {
    if (auto ok = check_name("a message id", message_id); !ok) return ok;
  }
  const std::string what = "publish to queue '" + queue + "'";
  if (state_ == nullptr) return checked(what);
  amqp_basic_properties_t props{};
  props._flags = AMQP_BASIC_DELIVERY_MODE_FLAG;
  props.delivery_mode = 2;  // persistent
  if (!message_id.empty()) {
    props._flags |= AMQP_BASIC_MESSAGE_ID_FLAG;
    props.message_id = amqp_cstring_bytes(message_id.c_str());
  }
  amqp_bytes_t bytes{body.size(), const_cast<char*>(body.data())};
  const int rc = amqp_basic_publish(state_, channel_, amqp_empty_bytes, amqp_cstring_bytes(queue.c_str()), 0, 0,
                                    &props, bytes);
  if (rc != AMQP_STATUS_OK) {
    close();
    return Status::error("RabbitMQ at " + address_.describe() + ": cannot " + what + ": " + amqp_error_string2(rc));
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
                               const std::vector<AmqpArgument>& arguments) {
  refusal_.reset();
  if (auto ok = check_name("a queue name", queue); !ok) return ok;
  const std::string what = "consume queue '" + queue + "'";
  if (state_ == nullptr) return checked(what);
  amqp_basic_qos(state_, channel_, 0, prefetch, 0);
  if (auto s = checked(what); !s) return s;
  std::vector<amqp_table_entry_t> entries;
  amqp_basic_consume(state_, channel_, amqp_cstring_bytes(queue.c_str()), amqp_empty_bytes, 0, 0, 0,
                     table_of(arguments, entries));
  return checked(what);
}

Expected<std::optional<AmqpMessage>> AmqpConnection::next(std::chrono::milliseconds timeout) {
  refusal_.reset();
  if (state_ == nullptr) return Error{checked("wait for a message").message()};
  amqp_maybe_release_buffers(state_);
  amqp_frame_t frame{};
  timeval tv = to_timeval(timeout);
  const int got = amqp_simple_wait_frame_noblock(state_, &frame, &tv);
  if (got == AMQP_STATUS_TIMEOUT) return std::optional<AmqpMessage>{};
  const std::string where = "RabbitMQ at " + address_.describe();
  if (got != AMQP_STATUS_OK) {
    close();
    return Error{where + ": cannot wait for a message: " + amqp_error_string2(got)};
  }
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
  if (method == AMQP_CHANNEL_CLOSE_METHOD) {
    const auto* m = static_cast<const amqp_channel_close_t*>(frame.payload.method.decoded);
    refusal_ = AmqpRefusal{m->reply_code, broker_text(m->reply_text, address_.password)};
  } else if (method == AMQP_CONNECTION_CLOSE_METHOD) {
    const auto* m = static_cast<const amqp_connection_close_t*>(frame.payload.method.decoded);
    refusal_ = AmqpRefusal{m->reply_code, broker_text(m->reply_text, address_.password)};
  }
  // The consume is gone with its channel or connection, and any other
  // frame here means the frames are out of step: the caller connects again.
  close();
  if (refusal_) return Error{where + " ended the consume: " + refusal_->text};
  return Error{where + ": an unexpected frame instead of a message"};
}

Expected<AmqpMessage> AmqpConnection::read_content(std::uint64_t delivery_tag, const std::string& of) {
  // rabbitmq-c's own reader waits for a message's content without a
  // deadline: a broker that stops mid-message would hang the worker. Each
  // frame here is waited for until the connection's timeout.
  const std::string where = "RabbitMQ at " + address_.describe();
  const auto deadline = std::chrono::steady_clock::now() + timeout_;
  amqp_frame_t frame{};
  auto wait = [&]() {
    const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - std::chrono::steady_clock::now());
    timeval tv = to_timeval(std::max(left, std::chrono::milliseconds(0)));
    return amqp_simple_wait_frame_noblock(state_, &frame, &tv);
  };
  auto broken = [&](const std::string& why) -> Error {
    close();  // mid-message, the connection's frames are out of step
    return Error{where + ": cannot read " + of + ": " + why};
  };
  int got = wait();
  if (got != AMQP_STATUS_OK) return broken(amqp_error_string2(got));
  if (frame.frame_type != AMQP_FRAME_HEADER || frame.channel != channel_) return broken("the broker sent something else");
  const std::uint64_t size = frame.payload.properties.body_size;
  if (size > kMaxPayloadBytes) {
    return broken("its body is " + std::to_string(size) + " bytes, over the " +
                  std::to_string(kMaxPayloadBytes >> 20) + " MiB a payload may have");
  }
  AmqpMessage m =
      message_of(delivery_tag, *static_cast<const amqp_basic_properties_t*>(frame.payload.properties.decoded));
  m.body.reserve(size);
  while (m.body.size() < size) {
    got = wait();
    if (got != AMQP_STATUS_OK) return broken(amqp_error_string2(got));
    if (frame.frame_type != AMQP_FRAME_BODY || frame.channel != channel_) return broken("the broker sent something else");
    m.body += bytes_text(frame.payload.body_fragment);
  }
  if (m.body.size() != size) return broken("its body is longer than its header said");
  return m;
}

Status AmqpConnection::ack(std::uint64_t delivery_tag) {
  refusal_.reset();
  if (state_ == nullptr) return checked("acknowledge a message");
  const int rc = amqp_basic_ack(state_, channel_, delivery_tag, 0);
  if (rc != AMQP_STATUS_OK) {
    close();
    return Status::error("RabbitMQ at " + address_.describe() + ": cannot acknowledge a message: " +
                         amqp_error_string2(rc));
  }
  return Status::ok();
}

Status AmqpConnection::reject(std::uint64_t delivery_tag, bool requeue) {
  refusal_.reset();
  if (state_ == nullptr) return checked("reject a message");
  const int rc = amqp_basic_reject(state_, channel_, delivery_tag, requeue ? 1 : 0);
  if (rc != AMQP_STATUS_OK) {
    close();
    return Status::error("RabbitMQ at " + address_.describe() + ": cannot reject a message: " + amqp_error_string2(rc));
  }
  return Status::ok();
}

}  // namespace pillbox::broker
