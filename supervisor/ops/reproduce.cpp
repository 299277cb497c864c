#include "supervisor/ops/reproduce.h"

#include <algorithm>

#include "supervisor/ops/payload_runner.h"
#include "supervisor/ops/quarantined_payload.h"

namespace pillbox {
namespace {

// The same payload, `runs` times.
class Repeats final : public PayloadPlanner {
 public:
  Repeats(const store::QuarantineEntry& entry, std::string payload, const ReproduceSettings& settings)
      : entry_(entry), payload_(std::move(payload)), settings_(settings) {}

  std::optional<Task> next() override {
    if (started_ >= settings_.runs) return std::nullopt;
    ++started_;
    return Task{entry_.key, payload_, started_};
  }

  void on_outcome(const Task&, const Outcome& outcome) override {
    ++result_.runs;
    if (outcome.kind != Kind::kOk && outcome.fingerprint == entry_.fingerprint) {
      ++result_.matches;
    } else {
      ++result_.others[std::string(to_string(outcome.kind)) + (outcome.fingerprint.empty() ? "" : " " + outcome.fingerprint)];
    }
    if (settings_.on_progress) settings_.on_progress(result_.runs, outcome);
  }

  ReproduceResult& result() { return result_; }

 private:
  const store::QuarantineEntry& entry_;
  std::string payload_;
  const ReproduceSettings& settings_;
  std::uint64_t started_ = 0;
  ReproduceResult result_;
};

}  // namespace

std::string reproduce_verdict(std::size_t runs, std::size_t matches) {
  return matches > 0 && matches * 2 >= runs ? "reliable" : "flaky";
}

Expected<ReproduceResult> reproduce_payload(const store::QuarantineEntry& entry, ChildConfig config,
                                            std::string payload, const ReproduceSettings& settings) {
  if (settings.runs == 0) return Error{"--runs must be at least 1"};
  const RunSettings run = planned_run_settings(std::move(config), settings.mode,
                                               std::min(settings.jobs, settings.runs), settings.sandbox_binary);
  Repeats planner(entry, std::move(payload), settings);
  auto report = run_planned(run, planner);
  if (!report) return Error{report.error()};
  ReproduceResult result = std::move(planner.result());
  result.stop_signal = report->stop_signal;
  if (result.stop_signal == 0) result.verdict = reproduce_verdict(result.runs, result.matches);
  return result;
}

std::string reproduce_detail(const store::QuarantineEntry& entry, const ReproduceResult& result) {
  std::string detail = result.verdict + ": " + std::to_string(result.matches) + " of " + std::to_string(result.runs) +
                       " runs ended with " + entry.fingerprint;
  for (const auto& [what, n] : result.others) detail += "; " + what + " x" + std::to_string(n);
  return detail;
}

Expected<ReproduceResult> reproduce_record(store::QuarantineStore& quarantine, std::int64_t id,
                                           const ReproduceSettings& settings) {
  if (settings.runs == 0) return Error{"--runs must be at least 1"};
  auto loaded = load_quarantined_payload(quarantine, id);
  if (!loaded) return Error{loaded.error()};
  const store::QuarantineRecord& record = loaded->record;
  auto config = recorded_config_of(record);
  if (!config) return Error{config.error()};
  auto result = reproduce_payload(record.entry, std::move(*config), std::move(loaded->payload), settings);
  if (!result || result->stop_signal != 0) return result;
  if (auto s = quarantine.record_reproduction(id, result->verdict, static_cast<std::int64_t>(result->runs),
                                              static_cast<std::int64_t>(result->matches), store::now_ms(),
                                              settings.actor, reproduce_detail(record.entry, *result));
      !s) {
    return Error{s.message()};
  }
  return result;
}

}  // namespace pillbox
