#include "supervisor/broker/kafka_publisher.h"

#include <algorithm>
#include <chrono>

#include "supervisor/broker/kafka_record_fit.h"
#include "supervisor/broker/kafka_topics.h"
#include "supervisor/io/random_hex.h"

namespace pillbox::broker {
namespace {

// The header that names the submit a record came from.
constexpr const char* kSubmitHeader = "pillbox-submit";

// What the broker said of one record of the batch being added.
struct Delivery {
  bool reported = false;
  RdKafka::ErrorCode error = RdKafka::ERR_NO_ERROR;
  std::string why;
  int32_t partition = -1;
  int64_t offset = -1;
};

}  // namespace

// The producer's delivery reports, each written into the Delivery its
// record was produced with (librdkafka calls it from poll() and flush(),
// on the caller's thread).
class KafkaPublisher::Reports : public RdKafka::DeliveryReportCb {
 public:
  void dr_cb(RdKafka::Message& message) override {
    auto* d = static_cast<Delivery*>(message.msg_opaque());
    if (d == nullptr) return;
    d->reported = true;
    d->error = message.err();
    d->why = message.errstr();
    d->partition = message.partition();
    d->offset = message.offset();
  }
};

Expected<std::unique_ptr<KafkaPublisher>> KafkaPublisher::open(const KafkaPublisherSettings& settings, bool& created) {
  created = false;
  std::unique_ptr<KafkaPublisher> p(new KafkaPublisher());
  p->bootstrap_ = settings.bootstrap;
  p->topic_ = settings.topic;
  auto hex = random_hex(8);
  if (!hex) return Error{"cannot make this submit's id: " + hex.error()};
  p->submit_id_ = *hex;
  p->reports_ = std::make_unique<Reports>();

  auto conf = kafka_conf(settings.bootstrap, "pillbox-submit", p->events_);
  if (!conf) return Error{conf.error()};
  // A record the broker's default limit takes, or the larger one asked
  // for (--max-payload), with room for its key, header and framing.
  p->max_record_ =
      std::max(kKafkaBrokerMessageMaxBytes, std::min<std::size_t>(settings.max_payload + (64u << 10), 1000000000));
  std::string why;
  if ((*conf)->set("dr_cb", p->reports_.get(), why) != RdKafka::Conf::CONF_OK) {
    return Error{"librdkafka refused the delivery callback: " + why};
  }
  for (const auto& [name, value] : std::initializer_list<std::pair<std::string, std::string>>{
           // Exactly once per record and in order within a partition,
           // whatever the retries; acknowledged by every in-sync replica.
           {"enable.idempotence", "true"},
           {"acks", "all"},
           // The Java clients' partitioner: a key lands where theirs put it.
           {"partitioner", "murmur2_random"},
           {"message.max.bytes", std::to_string(p->max_record_)},
           {"message.timeout.ms", std::to_string(kKafkaDeliveryTimeout.count())},
       }) {
    if (auto s = kafka_set(**conf, name, value); !s) return Error{s.message()};
  }
  p->producer_.reset(RdKafka::Producer::create(conf->get(), why));
  if (!p->producer_) return Error{"cannot make a Kafka producer: " + why};

  auto found = find_kafka_topic(*p->producer_, p->bootstrap_, p->events_, p->topic_);
  if (!found) return Error{found.error()};
  if (!*found) {
    const std::string missing = "topic " + p->topic_ + " does not exist on Kafka at " + p->bootstrap_.joined();
    if (!settings.create_topic) {
      return Error{missing + ": create it (" +
                       kafka_create_topic_command(p->bootstrap_, p->topic_, settings.partitions,
                                                  settings.replication_factor) +
                       ") or give --create-topics",
                   ErrorCode::kUsage};
    }
    if (auto s = create_kafka_topic(*p->producer_, p->bootstrap_, p->topic_, settings.partitions,
                                    settings.replication_factor);
        !s) {
      return Error{s.message(), s.code()};
    }
    created = true;
    // A created topic reaches every broker's metadata shortly after the
    // controller answers.
    const auto deadline = std::chrono::steady_clock::now() + kKafkaConnectTimeout;
    for (;;) {
      found = find_kafka_topic(*p->producer_, p->bootstrap_, p->events_, p->topic_);
      if (!found) return Error{found.error()};
      if (*found) break;
      if (std::chrono::steady_clock::now() > deadline) {
        return Error{"Kafka at " + p->bootstrap_.joined() + " created topic " + p->topic_ + " but does not list it " +
                     std::to_string(kKafkaConnectTimeout.count() / 1000) + " s later"};
      }
      p->producer_->poll(100);
    }
  }
  p->partitions_ = (*found)->partitions;
  return p;
}

KafkaPublisher::~KafkaPublisher() {
  // add() waited for each of its records: nothing is left to deliver.
  // Whatever is (an add() that failed midway) is not waited for again.
  if (producer_) producer_->purge(RdKafka::Producer::PURGE_QUEUE | RdKafka::Producer::PURGE_INFLIGHT);
}

Expected<std::vector<std::string>> KafkaPublisher::add(const std::vector<Task>& batch) {
  std::vector<Delivery> deliveries(batch.size());
  std::string produce_error;
  std::size_t produced = 0;
  for (; produced < batch.size(); ++produced) {
    const Task& task = batch[produced];
    RdKafka::Headers* headers = RdKafka::Headers::create();
    headers->add(kSubmitHeader, submit_id_);
    RdKafka::ErrorCode err;
    for (;;) {
      err = producer_->produce(topic_, RdKafka::Topic::PARTITION_UA, RdKafka::Producer::RK_MSG_COPY,
                               const_cast<char*>(task.payload.data()), task.payload.size(), task.key.data(),
                               task.key.size(), 0, headers, &deliveries[produced]);
      if (err != RdKafka::ERR__QUEUE_FULL) break;
      producer_->poll(100);  // the local queue drains as the brokers acknowledge
    }
    if (err != RdKafka::ERR_NO_ERROR) {
      delete headers;  // librdkafka owns them only once a record is taken
      produce_error = "the Kafka producer refused the record of " + task.key + " (" +
                      std::to_string(task.payload.size()) + " bytes): " +
                      (err == RdKafka::ERR_MSG_SIZE_TOO_LARGE
                           ? "with its key and header, over the producer's message.max.bytes (" +
                                 std::to_string(max_record_) + ")"
                           : RdKafka::err2str(err));
      break;
    }
  }
  // Every record taken is waited for, even after a refusal: its report
  // points into `deliveries`. librdkafka reports each by
  // message.timeout.ms; flush() gives up a little after.
  const auto limit = kKafkaDeliveryTimeout + std::chrono::seconds(5);
  const auto deadline = std::chrono::steady_clock::now() + limit;
  while (std::any_of(deliveries.begin(), deliveries.begin() + static_cast<std::ptrdiff_t>(produced),
                     [](const Delivery& d) { return !d.reported; })) {
    if (std::chrono::steady_clock::now() > deadline || events_.fatal()) {
      producer_->purge(RdKafka::Producer::PURGE_QUEUE | RdKafka::Producer::PURGE_INFLIGHT);
      producer_->poll(0);  // the purged records' reports, before `deliveries` goes
      break;
    }
    producer_->flush(100);
  }
  std::vector<std::string> ids;
  ids.reserve(batch.size());
  std::size_t acknowledged = 0;
  std::string failed;
  for (std::size_t i = 0; i < produced; ++i) {
    const Delivery& d = deliveries[i];
    if (d.reported && d.error == RdKafka::ERR_NO_ERROR) {
      ++acknowledged;
      ids.push_back(std::to_string(d.partition) + ":" + std::to_string(d.offset));
    } else if (failed.empty()) {
      failed = "Kafka at " + bootstrap_.joined() + " did not acknowledge the record of " + batch[i].key + ": " +
               (!d.reported ? "no answer within " + std::to_string(limit.count() / 1000) + " s"
                : d.error == RdKafka::ERR__MSG_TIMED_OUT
                    ? "no broker acknowledged it within " + std::to_string(kKafkaDeliveryTimeout.count() / 1000) + " s" +
                          (events_.last_error().empty() ? "" : " (" + events_.last_error() + ")")
                    : d.why);
    }
  }
  if (failed.empty() && produce_error.empty()) return ids;
  if (failed.empty()) {
    return Error{produce_error + " (the " + std::to_string(acknowledged) +
                 " records of the batch before it were acknowledged; it and those after it were not sent)"};
  }
  return Error{failed + " (" + std::to_string(acknowledged) + " of the batch's " + std::to_string(batch.size()) +
               " records were acknowledged; the others may or may not be in the topic)"};
}

}  // namespace pillbox::broker
