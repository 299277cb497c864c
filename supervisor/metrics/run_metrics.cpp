#include "supervisor/metrics/run_metrics.h"

namespace pillbox::metrics {

RunMetrics::RunMetrics() = default;

void RunMetrics::set_slots(std::size_t slots) {
  std::lock_guard lock(mutex_);
  counters_.slots = slots;
}

void RunMetrics::attempt_started() {
  std::lock_guard lock(mutex_);
  ++counters_.busy;
}

void RunMetrics::attempt_ended(Kind kind, std::uint64_t wall_ms) {
  std::lock_guard lock(mutex_);
  if (counters_.busy > 0) --counters_.busy;
  ++counters_.attempts[kind];
  counters_.attempt_seconds.observe(static_cast<double>(wall_ms) / 1000.0);
}

void RunMetrics::slot_freed() {
  std::lock_guard lock(mutex_);
  if (counters_.busy > 0) --counters_.busy;
}

void RunMetrics::verdict(Kind kind, const std::string& verdict, bool new_fingerprint) {
  std::lock_guard lock(mutex_);
  ++counters_.tasks[{kind, verdict}];
  if (new_fingerprint) ++counters_.new_fingerprints;
}

void RunMetrics::taken_back() {
  std::lock_guard lock(mutex_);
  ++counters_.taken_back;
}

void RunMetrics::input_error() {
  std::lock_guard lock(mutex_);
  ++counters_.input_errors;
}

void RunMetrics::set_breaker_open(bool open) {
  std::lock_guard lock(mutex_);
  counters_.breaker_open = open;
}

void RunMetrics::set_kafka_partitions(const std::string& topic,
                                      const std::vector<broker::KafkaPartitionLag>& partitions) {
  std::lock_guard lock(mutex_);
  counters_.kafka = true;
  counters_.kafka_topic = topic;
  counters_.kafka_partitions = partitions;
}

RunMetrics::Counters RunMetrics::snapshot() const {
  std::lock_guard lock(mutex_);
  return counters_;
}

void RunMetrics::render(MetricsText& out) const {
  const Counters c = snapshot();
  out.family("pillbox_tasks_total", "Tasks that got a verdict in this process, by failure kind and verdict.",
             MetricType::kCounter);
  for (const auto& [key, n] : c.tasks) {
    out.sample("pillbox_tasks_total", {{"kind", std::string(to_string(key.first))}, {"verdict", key.second}},
               static_cast<double>(n));
  }
  out.family("pillbox_attempts_total", "Attempts that ended in this process, by how they ended.", MetricType::kCounter);
  for (const auto& [kind, n] : c.attempts) {
    out.sample("pillbox_attempts_total", {{"kind", std::string(to_string(kind))}}, static_cast<double>(n));
  }
  out.family("pillbox_attempt_duration_seconds", "Wall-clock time of each attempt's child.", MetricType::kHistogram);
  out.histogram("pillbox_attempt_duration_seconds", {}, c.attempt_seconds);
  out.family("pillbox_new_fingerprints_total", "Failures whose fingerprint was never seen before (by the store; by a worker: among the fleet's dead letters).",
             MetricType::kCounter);
  out.sample("pillbox_new_fingerprints_total", {}, static_cast<double>(c.new_fingerprints));
  out.family("pillbox_verdicts_taken_back_total",
             "Poison verdicts taken back because a suspected handler outage explains them.", MetricType::kCounter);
  out.sample("pillbox_verdicts_taken_back_total", {}, static_cast<double>(c.taken_back));
  out.family("pillbox_input_errors_total", "Inputs that could not become a task.", MetricType::kCounter);
  out.sample("pillbox_input_errors_total", {}, static_cast<double>(c.input_errors));
  out.family("pillbox_breaker_open", "1 while the circuit breaker suspects a handler outage and holds intake.",
             MetricType::kGauge);
  out.sample("pillbox_breaker_open", {}, c.breaker_open ? 1 : 0);
  out.family("pillbox_slots_busy", "Slots running a task now.", MetricType::kGauge);
  out.sample("pillbox_slots_busy", {}, static_cast<double>(c.busy));
  out.family("pillbox_slots", "Slots of the run (--jobs).", MetricType::kGauge);
  out.sample("pillbox_slots", {}, static_cast<double>(c.slots));
  if (c.kafka) render_kafka(c, out);
}

void RunMetrics::render_kafka(const Counters& c, MetricsText& out) {
  struct Gauge {
    const char* name;
    const char* help;
    double (*value)(const broker::KafkaPartitionLag&);
    bool needs_end = false;  // no sample while the partition's end is not known (not 0: unknown)
  };
  static const Gauge kGauges[] = {
      {"pillbox_kafka_partition_lag_records",
       "Records of the partition its group has not got past: its end (the high watermark librdkafka last fetched) "
       "minus the offset this worker commits.",
       [](const broker::KafkaPartitionLag& p) { return static_cast<double>(p.lag); }, true},
      {"pillbox_kafka_partition_held_records",
       "Records of the partition this worker read and has not settled: buffered, waiting for a slot, running, "
       "waiting for a retry.",
       [](const broker::KafkaPartitionLag& p) { return static_cast<double>(p.held); }},
      {"pillbox_kafka_partition_settled_uncommitted_records",
       "Settled records of the partition behind one that is not: the commit cannot pass them yet.",
       [](const broker::KafkaPartitionLag& p) { return static_cast<double>(p.settled_uncommitted); }},
      {"pillbox_kafka_partition_behind",
       "1 while the worker says the partition is behind: its commit has waited, or its lag grown, for --behind-after.",
       [](const broker::KafkaPartitionLag& p) { return p.behind ? 1.0 : 0.0; }},
  };
  for (const Gauge& g : kGauges) {
    out.family(g.name, g.help, MetricType::kGauge);
    for (const broker::KafkaPartitionLag& p : c.kafka_partitions) {
      if (g.needs_end && p.end < 0) continue;
      out.sample(g.name, {{"topic", c.kafka_topic}, {"partition", std::to_string(p.partition)}}, g.value(p));
    }
  }
}

}  // namespace pillbox::metrics
