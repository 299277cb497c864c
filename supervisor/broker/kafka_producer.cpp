#include "supervisor/broker/kafka_producer.h"

#include <librdkafka/rdkafka.h>
#include <sys/eventfd.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstring>

namespace pillbox::broker {

struct KafkaProducerCallbacks {
  // A record's report: its callback (given to produce() as the record's
  // opaque) runs, then goes.
  // librdkafka's log lines: a failed record's report says why (below).
  static void log(const rd_kafka_t*, int, const char*, const char*) {}
  static void delivered(rd_kafka_t*, const rd_kafka_message_t* m, void* opaque) {
    auto* self = static_cast<KafkaProducer*>(opaque);
    std::unique_ptr<KafkaProducer::Done> done(static_cast<KafkaProducer::Done*>(m->_private));
    --self->outstanding_;
    if (!done || !*done || self->closing_) return;
    if (m->err != RD_KAFKA_RESP_ERR_NO_ERROR) {
      const std::string topic = m->rkt != nullptr ? rd_kafka_topic_name(m->rkt) : "?";
      (*done)(Error{"Kafka did not take the record for " + topic + ": " + rd_kafka_err2str(m->err)});
    } else {
      (*done)(KafkaDelivered{m->partition, m->offset});
    }
  }
};

Expected<std::unique_ptr<KafkaProducer>> KafkaProducer::open(
    std::vector<std::pair<std::string, std::string>> properties) {
  std::unique_ptr<KafkaProducer> self(new KafkaProducer());
  char why[512];
  rd_kafka_conf_t* conf = rd_kafka_conf_new();
  properties.emplace_back("enable.idempotence", "true");
  // Sent at once: each record here is waited for by a task (its start
  // before its payload reaches a child, its result, then its settled
  // entry), and librdkafka's default linger of 5 ms put 15 ms of waiting
  // on every task. Records still share a request whenever they queue up
  // behind one in flight (at most 5 per broker, in order: idempotence).
  properties.emplace_back("linger.ms", "0");
  for (const auto& [name, value] : properties) {
    if (rd_kafka_conf_set(conf, name.c_str(), value.c_str(), why, sizeof why) != RD_KAFKA_CONF_OK) {
      rd_kafka_conf_destroy(conf);
      return Error{"the Kafka producer's setting " + name + "=" + value + " was refused: " + why};
    }
  }
  rd_kafka_conf_set_opaque(conf, self.get());
  rd_kafka_conf_set_dr_msg_cb(conf, KafkaProducerCallbacks::delivered);
  rd_kafka_conf_set_log_cb(conf, KafkaProducerCallbacks::log);
  rd_kafka_t* rk = rd_kafka_new(RD_KAFKA_PRODUCER, conf, why, sizeof why);
  if (rk == nullptr) {
    rd_kafka_conf_destroy(conf);
    return Error{std::string("cannot start a Kafka producer: ") + why};
  }
  self->rk_ = rk;
  self->queue_ = rd_kafka_queue_get_main(rk);
  self->wake_.reset(eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC));
  if (!self->wake_.valid()) return Error{std::string("eventfd: ") + std::strerror(errno)};
  static const std::uint64_t kOne = 1;
  rd_kafka_queue_io_event_enable(self->queue_, self->wake_.get(), &kOne, sizeof kOne);
  return self;
}

KafkaProducer::~KafkaProducer() {
  if (rk_ == nullptr) return;
  // What was produced and not reported is dropped with its callback
  // (rd_kafka_purge): the owner is going, nobody would hear it.
  closing_ = true;
  rd_kafka_purge(rk_, RD_KAFKA_PURGE_F_QUEUE | RD_KAFKA_PURGE_F_INFLIGHT);
  rd_kafka_poll(rk_, 0);
  if (queue_ != nullptr) rd_kafka_queue_destroy(queue_);
  rd_kafka_destroy(rk_);
}

Status KafkaProducer::produce(const KafkaOutgoing& m, Done done) {
  rd_kafka_headers_t* headers = rd_kafka_headers_new(m.headers.size());
  for (const auto& [name, value] : m.headers) {
    rd_kafka_header_add(headers, name.data(), static_cast<ssize_t>(name.size()),
                        value ? value->data() : nullptr, value ? static_cast<ssize_t>(value->size()) : 0);
  }
  auto* callback = new Done(std::move(done));
  char* key = m.key ? const_cast<char*>(m.key->data()) : nullptr;
  const std::size_t key_size = m.key ? m.key->size() : 0;
  char* value = m.value ? const_cast<char*>(m.value->data()) : nullptr;
  const std::size_t value_size = m.value ? m.value->size() : 0;
  const std::int32_t partition = m.partition >= 0 ? m.partition : RD_KAFKA_PARTITION_UA;
  // A null key or value is sent as null (no pointer), an empty one as empty.
  const rd_kafka_resp_err_t err = rd_kafka_producev(
      rk_, RD_KAFKA_V_TOPIC(m.topic.c_str()), RD_KAFKA_V_PARTITION(partition), RD_KAFKA_V_KEY(key, key_size),
      RD_KAFKA_V_VALUE(value, value_size),
      RD_KAFKA_V_MSGFLAGS(RD_KAFKA_MSG_F_COPY), RD_KAFKA_V_HEADERS(headers), RD_KAFKA_V_OPAQUE(callback),
      RD_KAFKA_V_END);
  if (err != RD_KAFKA_RESP_ERR_NO_ERROR) {
    // Not taken: the headers and the callback are still ours.
    rd_kafka_headers_destroy(headers);
    delete callback;
    return Status::error("cannot produce to " + m.topic + ": " + rd_kafka_err2str(err));
  }
  ++outstanding_;
  return Status::ok();
}

void KafkaProducer::drain() {
  std::uint64_t count = 0;
  [[maybe_unused]] const ssize_t n = ::read(wake_.get(), &count, sizeof count);
  rd_kafka_poll(rk_, 0);
}

bool KafkaProducer::flush(int timeout_ms) {
  const auto until = std::chrono::steady_clock::now() + std::chrono::milliseconds(timeout_ms);
  while (outstanding_ > 0) {
    const auto left =
        std::chrono::duration_cast<std::chrono::milliseconds>(until - std::chrono::steady_clock::now()).count();
    if (left <= 0) return false;
    rd_kafka_poll(rk_, static_cast<int>(std::min<long long>(left, 100)));
  }
  return true;
}

std::optional<Expected<KafkaDelivered>> KafkaProducer::produce_and_wait(const KafkaOutgoing& m, int timeout_ms) {
  // Shared: a report that comes after this call gave up (in a later call's
  // flush) must not write to a frame that is gone.
  auto reported = std::make_shared<std::optional<Expected<KafkaDelivered>>>();
  if (Status queued = produce(m, [reported](const Expected<KafkaDelivered>& d) { *reported = d; }); !queued) {
    return Expected<KafkaDelivered>(Error{queued.message(), queued.code()});
  }
  if (!flush(timeout_ms) || !*reported) return std::nullopt;
  return **reported;
}

std::string KafkaProducer::fatal_error() const {
  char why[512];
  const rd_kafka_resp_err_t err = rd_kafka_fatal_error(rk_, why, sizeof why);
  return err == RD_KAFKA_RESP_ERR_NO_ERROR ? "" : std::string(rd_kafka_err2str(err)) + ": " + why;
}

Expected<std::unique_ptr<KafkaProducer>> open_kafka_tool_producer(const KafkaBootstrap& bootstrap,
                                                                  const std::string& client_id,
                                                                  const KafkaProperties& extra) {
  KafkaProperties properties = kafka_properties(bootstrap, client_id);
  properties.emplace_back("message.timeout.ms", std::to_string(kKafkaDeliveryTimeout.count()));
  properties.insert(properties.end(), extra.begin(), extra.end());
  auto producer = KafkaProducer::open(std::move(properties));
  if (!producer) return Error{producer.error(), ErrorCode::kSetup};
  return producer;
}

}  // namespace pillbox::broker
