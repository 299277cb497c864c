#include "supervisor/broker/kafka_group_consumer.h"

#include <librdkafka/rdkafka.h>
#include <sys/eventfd.h>
#include <unistd.h>

#include <algorithm>
#include <cstdlib>
#include <cstring>

namespace pillbox::broker {

// librdkafka's callbacks, which reach the consumer's private parts.
struct KafkaConsumerCallbacks {
  static void rebalance(rd_kafka_t* rk, rd_kafka_resp_err_t err, rd_kafka_topic_partition_list_t* partitions,
                        void* opaque) {
    auto* self = static_cast<KafkaGroupConsumer*>(opaque);
    if (err == RD_KAFKA_RESP_ERR__ASSIGN_PARTITIONS) {
      self->on_rebalance(true, partitions);
    } else {
      // _REVOKE_PARTITIONS, or an error: librdkafka asks for the whole
      // assignment to be dropped either way.
      self->on_rebalance(false, partitions);
    }
    (void)rk;
  }
  static void committed(rd_kafka_t*, rd_kafka_resp_err_t err, rd_kafka_topic_partition_list_t* offsets,
                        void* opaque) {
    auto* self = static_cast<KafkaGroupConsumer*>(opaque);
    if (!self->handlers_.on_committed) return;
    if (err == RD_KAFKA_RESP_ERR__NO_OFFSET) {
      self->handlers_.on_committed(Status::ok());  // nothing to commit
      return;
    }
    if (err != RD_KAFKA_RESP_ERR_NO_ERROR) {
      self->handlers_.on_committed(Status::error(std::string("the commit failed: ") + rd_kafka_err2str(err)));
      return;
    }
    for (int i = 0; offsets != nullptr && i < offsets->cnt; ++i) {
      if (offsets->elems[i].err != RD_KAFKA_RESP_ERR_NO_ERROR) {
        self->handlers_.on_committed(Status::error("the commit of partition " +
                                                   std::to_string(offsets->elems[i].partition) + " failed: " +
                                                   rd_kafka_err2str(offsets->elems[i].err)));
        return;
      }
    }
    self->handlers_.on_committed(Status::ok());
  }
  // librdkafka's log lines: its errors come through error() as well; the
  // rest (a mock cluster's "auto create" warnings, reconnects) would be
  // printed on stderr by default, line after line.
  static void log(const rd_kafka_t*, int, const char*, const char*) {}
  static void error(rd_kafka_t*, int err, const char* reason, void* opaque) {
    auto* self = static_cast<KafkaGroupConsumer*>(opaque);
    if (self->handlers_.on_notice) {
      self->handlers_.on_notice(std::string(rd_kafka_err2str(static_cast<rd_kafka_resp_err_t>(err))) + ": " +
                                (reason != nullptr ? reason : ""));
    }
  }
};

namespace {

struct PartitionList {
  rd_kafka_topic_partition_list_t* list;
  explicit PartitionList(int size) : list(rd_kafka_topic_partition_list_new(size)) {}
  ~PartitionList() { rd_kafka_topic_partition_list_destroy(list); }
  PartitionList(const PartitionList&) = delete;
  PartitionList& operator=(const PartitionList&) = delete;
};

// What a buffered record holds in memory, near enough.
std::size_t size_of(const KafkaMessage& m) {
  std::size_t n = sizeof m + (m.key ? m.key->size() : 0) + (m.value ? m.value->size() : 0);
  for (const auto& [name, value] : m.headers) n += name.size() + (value ? value->size() : 0);
  return n;
}

KafkaMessage read_message(const rd_kafka_message_t* m) {
  KafkaMessage out;
  out.topic = rd_kafka_topic_name(m->rkt);
  out.partition = m->partition;
  out.offset = m->offset;
  // Kafka tells a null key or value from an empty one; librdkafka gives a
  // null pointer for null.
  if (m->key != nullptr) out.key = std::string(static_cast<const char*>(m->key), m->key_len);
  if (m->payload != nullptr) out.value = std::string(static_cast<const char*>(m->payload), m->len);
  out.value_size = m->len;
  rd_kafka_timestamp_type_t type = RD_KAFKA_TIMESTAMP_NOT_AVAILABLE;
  const std::int64_t ts = rd_kafka_message_timestamp(m, &type);
  out.timestamp_ms = type == RD_KAFKA_TIMESTAMP_NOT_AVAILABLE ? -1 : ts;
  rd_kafka_headers_t* headers = nullptr;
  if (rd_kafka_message_headers(m, &headers) == RD_KAFKA_RESP_ERR_NO_ERROR && headers != nullptr) {
    const char* name = nullptr;
    const void* value = nullptr;
    std::size_t size = 0;
    for (std::size_t i = 0; rd_kafka_header_get_all(headers, i, &name, &value, &size) == RD_KAFKA_RESP_ERR_NO_ERROR;
         ++i) {
      out.headers.emplace_back(name, value != nullptr ? std::optional<std::string>(std::string(
                                                            static_cast<const char*>(value), size))
                                                      : std::nullopt);
    }
  }
  return out;
}

}  // namespace

Expected<std::unique_ptr<KafkaGroupConsumer>> KafkaGroupConsumer::open(KafkaConsumerSettings settings,
                                                                       Handlers handlers) {
  std::unique_ptr<KafkaGroupConsumer> self(new KafkaGroupConsumer(std::move(settings), std::move(handlers)));
  const KafkaConsumerSettings& s = self->settings_;
  char why[512];
  rd_kafka_conf_t* conf = rd_kafka_conf_new();
  auto set = [&](const std::string& name, const std::string& value) -> Status {
    if (rd_kafka_conf_set(conf, name.c_str(), value.c_str(), why, sizeof why) != RD_KAFKA_CONF_OK) {
      return Status::error("the Kafka consumer's setting " + name + "=" + value + " was refused: " + why);
    }
    return Status::ok();
  };
  std::vector<std::pair<std::string, std::string>> all = s.properties;
  // The consumer's own: offsets are committed by the worker, never by the
  // client on its own (a record is committed once it is settled), and a
  // group that has committed nothing reads its topic from the start.
  all.insert(all.end(), {{"group.id", s.group},
                         {"enable.auto.commit", "false"},
                         {"enable.auto.offset.store", "false"},
                         {"auto.offset.reset", "earliest"},
                         {"enable.partition.eof", "false"},
                         {"allow.auto.create.topics", "false"}});
  for (const auto& [name, value] : all) {
    if (Status st = set(name, value); !st) {
      rd_kafka_conf_destroy(conf);
      return Error{st.message()};
    }
  }
  rd_kafka_conf_set_opaque(conf, self.get());
  rd_kafka_conf_set_rebalance_cb(conf, KafkaConsumerCallbacks::rebalance);
  rd_kafka_conf_set_offset_commit_cb(conf, KafkaConsumerCallbacks::committed);
  rd_kafka_conf_set_error_cb(conf, KafkaConsumerCallbacks::error);
  rd_kafka_conf_set_log_cb(conf, KafkaConsumerCallbacks::log);
  rd_kafka_t* rk = rd_kafka_new(RD_KAFKA_CONSUMER, conf, why, sizeof why);
  if (rk == nullptr) {
    rd_kafka_conf_destroy(conf);
    return Error{std::string("cannot start a Kafka consumer: ") + why};
  }
  self->rk_ = rk;
  rd_kafka_poll_set_consumer(rk);
  self->queue_ = rd_kafka_queue_get_consumer(rk);
  self->wake_.reset(eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC));
  if (!self->wake_.valid()) return Error{std::string("eventfd: ") + std::strerror(errno)};
  static const std::uint64_t kOne = 1;
  rd_kafka_queue_io_event_enable(self->queue_, self->wake_.get(), &kOne, sizeof kOne);
  PartitionList topics(1);
  rd_kafka_topic_partition_list_add(topics.list, s.topic.c_str(), RD_KAFKA_PARTITION_UA);
  if (const rd_kafka_resp_err_t err = rd_kafka_subscribe(rk, topics.list); err != RD_KAFKA_RESP_ERR_NO_ERROR) {
    return Error{"cannot subscribe to topic " + s.topic + ": " + rd_kafka_err2str(err)};
  }
  return self;
}

KafkaGroupConsumer::~KafkaGroupConsumer() {
  if (rk_ == nullptr) return;
  close();
  if (queue_ != nullptr) rd_kafka_queue_destroy(queue_);
  rd_kafka_destroy(rk_);
}

void KafkaGroupConsumer::close() {
  if (closed_ || rk_ == nullptr) return;
  closed_ = true;
  // Serves the last rebalance (the revoke) and the last commit answers here.
  rd_kafka_consumer_close(rk_);
}

void KafkaGroupConsumer::pump() {
  if (closed_) return;
  std::uint64_t count = 0;
  // Emptied before the queue is: an event that comes in between raises it again.
  [[maybe_unused]] const ssize_t n = ::read(wake_.get(), &count, sizeof count);
  while (rd_kafka_message_t* m = rd_kafka_consumer_poll(rk_, 0)) {
    if (m->err != RD_KAFKA_RESP_ERR_NO_ERROR) {
      if (handlers_.on_notice) {
        std::string where = m->rkt != nullptr ? std::string(" (") + rd_kafka_topic_name(m->rkt) + " partition " +
                                                    std::to_string(m->partition) + ")"
                                              : "";
        handlers_.on_notice(rd_kafka_message_errstr(m) + where);
      }
    } else if (assigned_.count(m->partition) > 0) {
      Buffer& buffer = buffered_[m->partition];
      buffer.records.push_back(read_message(m));
      buffer.bytes += size_of(buffer.records.back());
      sync_pause(m->partition);
    }
    rd_kafka_message_destroy(m);
  }
}

std::optional<KafkaMessage> KafkaGroupConsumer::next(const std::set<std::int32_t>& skip) {
  // The partition whose first record has waited longest: by its timestamp
  // where both have one, else by partition (fair enough; Kafka promises no
  // order across partitions).
  Buffer* best = nullptr;
  for (auto& [partition, buffer] : buffered_) {
    const auto& records = buffer.records;
    if (records.empty() || skip.count(partition) > 0 || paused_by_caller_.count(partition) > 0) continue;
    if (best == nullptr || (records.front().timestamp_ms >= 0 && best->records.front().timestamp_ms >= 0 &&
                            records.front().timestamp_ms < best->records.front().timestamp_ms)) {
      best = &buffer;
    }
  }
  if (best == nullptr) return std::nullopt;
  KafkaMessage m = std::move(best->records.front());
  best->records.pop_front();
  best->bytes -= std::min(best->bytes, size_of(m));
  if (best->records.empty()) best->bytes = 0;
  sync_pause(m.partition);
  return m;
}

std::size_t KafkaGroupConsumer::buffered() const {
  std::size_t n = 0;
  for (const auto& [partition, buffer] : buffered_) n += buffer.records.size();
  return n;
}

std::size_t KafkaGroupConsumer::buffered(std::int32_t partition) const {
  const auto it = buffered_.find(partition);
  return it == buffered_.end() ? 0 : it->second.records.size();
}

void KafkaGroupConsumer::pause(std::int32_t partition) {
  paused_by_caller_.insert(partition);
  sync_pause(partition);
}

void KafkaGroupConsumer::resume(std::int32_t partition) {
  paused_by_caller_.erase(partition);
  sync_pause(partition);
}

void KafkaGroupConsumer::sync_pause(std::int32_t partition) {
  if (closed_ || assigned_.count(partition) == 0) return;
  const auto it = buffered_.find(partition);
  const std::size_t records = it == buffered_.end() ? 0 : it->second.records.size();
  const std::size_t bytes = it == buffered_.end() ? 0 : it->second.bytes;
  const std::size_t max_records = std::max<std::size_t>(settings_.max_buffered, 2);
  const std::size_t max_bytes = settings_.max_buffered_bytes / std::max<std::size_t>(assigned_.size(), 1);
  const bool paused = paused_now_.count(partition) > 0;
  const bool full = records >= max_records || bytes >= max_bytes;
  // Hysteresis: a full buffer pauses; a paused one resumes only at half.
  const bool drained = records <= max_records / 2 && bytes <= max_bytes / 2;
  const bool want = paused_by_caller_.count(partition) > 0 || full || (paused && !drained);
  if (want == paused) return;
  PartitionList one(1);
  rd_kafka_topic_partition_list_add(one.list, settings_.topic.c_str(), partition);
  if (want) {
    rd_kafka_pause_partitions(rk_, one.list);
    paused_now_.insert(partition);
  } else {
    rd_kafka_resume_partitions(rk_, one.list);
    paused_now_.erase(partition);
  }
}

Status KafkaGroupConsumer::commit(const std::map<std::int32_t, KafkaCommitted>& offsets, bool wait) {
  if (offsets.empty()) return Status::ok();
  PartitionList list(static_cast<int>(offsets.size()));
  for (const auto& [partition, committed] : offsets) {
    rd_kafka_topic_partition_t* p = rd_kafka_topic_partition_list_add(list.list, settings_.topic.c_str(), partition);
    p->offset = committed.offset;
    if (!committed.metadata.empty()) {
      // The list frees it (rd_kafka_topic_partition_list_destroy: free()).
      p->metadata = std::malloc(committed.metadata.size());
      std::memcpy(p->metadata, committed.metadata.data(), committed.metadata.size());
      p->metadata_size = committed.metadata.size();
    }
  }
  if (const rd_kafka_resp_err_t err = rd_kafka_commit(rk_, list.list, wait ? 0 : 1); err != RD_KAFKA_RESP_ERR_NO_ERROR) {
    return Status::error(std::string("cannot commit: ") + rd_kafka_err2str(err));
  }
  return Status::ok();
}

std::optional<std::pair<std::int64_t, std::int64_t>> KafkaGroupConsumer::watermarks(std::int32_t partition) const {
  std::int64_t low = RD_KAFKA_OFFSET_INVALID;
  std::int64_t high = RD_KAFKA_OFFSET_INVALID;
  if (rd_kafka_get_watermark_offsets(rk_, settings_.topic.c_str(), partition, &low, &high) !=
          RD_KAFKA_RESP_ERR_NO_ERROR ||
      high == RD_KAFKA_OFFSET_INVALID) {
    return std::nullopt;
  }
  return std::make_pair(low, high);
}

Expected<KafkaCommitted> KafkaGroupConsumer::read_committed(std::int32_t partition) {
  PartitionList one(1);
  rd_kafka_topic_partition_t* p = rd_kafka_topic_partition_list_add(one.list, settings_.topic.c_str(), partition);
  rd_kafka_resp_err_t err = rd_kafka_committed(rk_, one.list, settings_.committed_timeout_ms);
  if (err == RD_KAFKA_RESP_ERR_NO_ERROR) err = p->err;
  if (err != RD_KAFKA_RESP_ERR_NO_ERROR) {
    return Error{"cannot read what the group committed for partition " + std::to_string(partition) + ": " +
                 rd_kafka_err2str(err)};
  }
  KafkaCommitted c;
  c.offset = p->offset;
  if (p->metadata != nullptr) c.metadata.assign(static_cast<const char*>(p->metadata), p->metadata_size);
  return c;
}

std::string KafkaGroupConsumer::fatal_error() const {
  char why[512];
  const rd_kafka_resp_err_t err = rd_kafka_fatal_error(rk_, why, sizeof why);
  return err == RD_KAFKA_RESP_ERR_NO_ERROR ? "" : std::string(rd_kafka_err2str(err)) + ": " + why;
}

void KafkaGroupConsumer::on_rebalance(bool assign, rd_kafka_topic_partition_list_t* partitions) {
  if (!assign) {
    std::vector<std::int32_t> taken(assigned_.begin(), assigned_.end());
    if (handlers_.on_revoke && !taken.empty()) handlers_.on_revoke(taken);
    rd_kafka_assign(rk_, nullptr);
    assigned_.clear();
    paused_now_.clear();
    paused_by_caller_.clear();
    buffered_.clear();
    return;
  }
  // What the group committed, with each commit's metadata, before anything
  // of them is fetched: the owner reads where its attempt log starts.
  std::map<std::int32_t, KafkaCommitted> committed;
  const rd_kafka_resp_err_t err = rd_kafka_committed(rk_, partitions, settings_.committed_timeout_ms);
  for (int i = 0; i < partitions->cnt; ++i) {
    const rd_kafka_topic_partition_t& p = partitions->elems[i];
    KafkaCommitted c;
    if (err == RD_KAFKA_RESP_ERR_NO_ERROR && p.err == RD_KAFKA_RESP_ERR_NO_ERROR) {
      c.offset = p.offset;
      if (p.metadata != nullptr) c.metadata.assign(static_cast<const char*>(p.metadata), p.metadata_size);
    } else if (handlers_.on_notice) {
      handlers_.on_notice("cannot read what the group committed for partition " + std::to_string(p.partition) +
                          ": " + rd_kafka_err2str(err != RD_KAFKA_RESP_ERR_NO_ERROR ? err : p.err) +
                          " (it starts paused)");
      c.known = false;
    }
    committed[p.partition] = std::move(c);
  }
  std::set<std::int32_t> start_paused = handlers_.on_assign ? handlers_.on_assign(committed) : std::set<std::int32_t>{};
  for (int i = 0; i < partitions->cnt; ++i) {
    rd_kafka_topic_partition_t& p = partitions->elems[i];
    const KafkaCommitted& c = committed[p.partition];
    if (!c.known) start_paused.insert(p.partition);
    p.offset = c.offset >= 0 ? c.offset : RD_KAFKA_OFFSET_INVALID;
    assigned_.insert(p.partition);
  }
  rd_kafka_assign(rk_, partitions);
  for (const std::int32_t partition : start_paused) pause(partition);
}

}  // namespace pillbox::broker
