#include "supervisor/serve/amqp_console_source.h"

namespace pillbox::serve {
namespace {

FleetNames names_of(const broker::AmqpAddress& address, const std::string& queue) {
  return {"RabbitMQ", address.describe(), address.describe() + " " + broker::amqp_queue_names(queue).dlq,
          "queue " + queue, {"--amqp", address.url_without_password(), "--queue", queue}};
}

}  // namespace

Expected<std::unique_ptr<AmqpSource>> AmqpSource::open(const broker::AmqpAddress& address, const std::string& queue,
                                                       FleetTrust trust) {
  auto quarantine = broker::AmqpQuarantine::open(address, queue);
  if (!quarantine) return Error{quarantine.error(), quarantine.error_code()};
  return std::unique_ptr<AmqpSource>(new AmqpSource(address, queue, std::move(*quarantine), std::move(trust)));
}

AmqpSource::AmqpSource(broker::AmqpAddress address, std::string queue, broker::AmqpQuarantine quarantine,
                       FleetTrust trust)
    : FleetSource(names_of(address, queue), std::move(trust)),
      address_(std::move(address)),
      queue_(std::move(queue)),
      quarantine_(std::move(quarantine)) {
  use(*quarantine_);
}

std::vector<std::pair<std::string, std::string>> AmqpSource::cli_source_env() const {
  // Always set: a value serve inherited is not the one its URL may name.
  return {{broker::kAmqpPasswordEnv, address_.password}};
}

bool AmqpSource::answers() {
  // AMQP has no PING: a passive declare of NAME.dlq is the round trip that
  // finds a connection the broker dropped since the last request (a
  // restart), or a NAME.dlq deleted (made again, and said, by connect()).
  if (!quarantine_ || quarantine_->connection().broken()) return false;
  return quarantine_->connection().check_queue(quarantine_->names().dlq).has_value();
}

broker::FleetDeadLetters* AmqpSource::connect(ApiReply& error) {
  auto connection = broker::AmqpConnection::open(address_);
  if (!connection) {
    error = unreachable(connection.error());
    return nullptr;
  }
  auto opened = broker::AmqpQuarantine::open(*connection, queue_);
  if (!opened) {
    const auto& refused = connection->refusal();
    const int code = connection->broken() || !refused ? 0 : refused->code;
    if (code == 404) {
      // It was there when the console started. For about a second after
      // a restart RabbitMQ says NOT_FOUND of queues it is still recovering
      // (seen on 3.10.8): not the 500 of a console misconfigured.
      const std::string dlq = broker::amqp_queue_names(queue_).dlq;
      error = error_reply(503, "RabbitMQ at " + address_.describe() + " has no queue '" + dlq +
                                   "' now, though it had when the console started: it is still recovering its "
                                   "queues after a restart (the console answers again once it has), or '" + dlq +
                                   "' was deleted (a worker of queue " + queue_ + " declares it again at its start)");
    } else if (code == 406 || code == 403) {
      // One of another type, or not this user's: said as it is.
      error = error_reply(500, opened.error());
    } else {
      // The connection broke, or the broker cannot serve now.
      error = unreachable(opened.error());
    }
    return nullptr;
  }
  quarantine_.emplace(std::move(*opened));
  return &*quarantine_;
}

FleetSource::Link AmqpSource::link() {
  return quarantine_ && quarantine_->connection().broken() ? Link::kBroken : Link::kUp;
}

Expected<std::unique_ptr<broker::FleetDeadLetters>> AmqpSource::open_apart() const {
  auto q = broker::AmqpQuarantine::open(address_, queue_);
  if (!q) return Error{q.error(), q.error_code()};
  return std::unique_ptr<broker::FleetDeadLetters>(std::make_unique<broker::AmqpQuarantine>(std::move(*q)));
}

}  // namespace pillbox::serve
