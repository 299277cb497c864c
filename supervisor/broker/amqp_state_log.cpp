#include "supervisor/broker/amqp_state_log.h"

#include <amqp.h>

#include <utility>

#include "supervisor/broker/amqp_replay_notice.h"
#include "supervisor/broker/amqp_stream_reader.h"
#include "supervisor/broker/amqp_topology.h"

namespace pillbox::broker {

std::string amqp_state_log_name(const std::string& queue) { return queue + ".dlq.state"; }

Status declare_state_log(AmqpConnection& c, const std::string& queue) {
  const std::string name = amqp_state_log_name(queue);
  const std::vector<AmqpField> arguments = stream_queue_arguments();
  auto declared = c.declare_queue(name, arguments);
  if (declared) return Status::ok();
  if (c.refusal() && c.refusal()->code == AMQP_PRECONDITION_FAILED) {
    return Status::error(explain_mismatch(name, "RabbitMQ at " + c.address().describe(), *c.refusal(), arguments),
                         ErrorCode::kSetup);
  }
  return Status::error(declared.error(), ErrorCode::kSetup);
}

class AmqpStateLog::Stream final : public StateLogAccess {
 public:
  Stream(AmqpConnection& connection, const std::string& queue)
      : c_(connection), queue_(queue), name_(amqp_state_log_name(queue)) {}

  std::string name() const override { return name_; }

  Expected<std::int64_t> end() override {
    if (auto found = c_.check_queue(name_); !found) {
      if (c_.refusal() && c_.refusal()->code == AMQP_NOT_FOUND) return 0;  // nobody acted on a record yet
      return Error{found.error(), found.error_code()};
    }
    AmqpStreamReader reader(c_, name_, kMaxStateBytes);
    return reader.end();
  }

  Status read(std::int64_t from, std::int64_t to, const std::function<bool(const StateLogEntry&)>& stop) override {
    AmqpStreamReader reader(c_, name_, kMaxStateBytes);
    auto apply = [&](AmqpMessage&& m) {
      if (is_replay_notice(m)) return true;  // a worker's word on a redrive (amqp_replay_notice.h), no state
      const AmqpValue* writer = find_field(m.headers, kStateWriterHeader);
      return !stop(StateLogEntry{m.body_omitted ? nullptr : &m.body, writer != nullptr ? writer->text() : nullptr});
    };
    if (to >= 0) return reader.read(from, to, apply);
    return reader.read_on(from, apply);
  }

  Status prepare() override {
    if (auto s = declare_state_log(c_, queue_); !s) return s;
    return c_.confirm_publishes();
  }

  Status append(const std::string& body, const std::string& writer) override {
    AmqpOutgoing m;
    m.body = body;
    m.headers = {{std::string(kStateWriterHeader), writer}};
    if (auto s = c_.publish(name_, m); !s) return s;
    return c_.wait_confirmed();
  }

 private:
  AmqpConnection& c_;
  std::string queue_;  // NAME
  std::string name_;
};

AmqpStateLog::AmqpStateLog(AmqpConnection& connection, const std::string& queue)
    : stream_(std::make_unique<Stream>(connection, queue)), log_(*stream_) {}

AmqpStateLog::~AmqpStateLog() = default;

}  // namespace pillbox::broker
