#include "supervisor/ops/reproduce.h"

#include <algorithm>
#include <filesystem>

#include "supervisor/io/terminal_text.h"
#include "supervisor/ops/payload_runner.h"
#include "supervisor/ops/quarantined_payload.h"

namespace pillbox {
namespace {

// How much of a run's message an audit entry keeps: the trail is read as a
// list, and a child's message can be 16 KiB of whatever it printed.
constexpr std::size_t kDetailMessageBytes = 300;

std::string first_line(const std::string& text, std::size_t max_bytes) {
  std::string line = text.substr(0, text.find('\n'));
  if (line.size() <= max_bytes) return line;
  std::size_t cut = max_bytes;
  // Not inside a UTF-8 sequence: the cut must not make text that was valid invalid.
  while (cut > 0 && (static_cast<unsigned char>(line[cut]) & 0xC0) == 0x80) --cut;
  return line.substr(0, cut) + "...";
}

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

  void on_outcome(const Task& task, const Outcome& outcome) override {
    ++result_.runs;
    if (outcome.kind != Kind::kOk && outcome.fingerprint == entry_.fingerprint) {
      ++result_.matches;
    } else {
      const std::string kind(to_string(outcome.kind));
      OtherOutcome& other = result_.others[outcome_label(kind, outcome.fingerprint)];
      // With several jobs, runs end out of order: keep the earliest run's words.
      if (other.count == 0 || task.ref < other.first_run) {
        other.first_run = task.ref;
        other.kind = kind;
        other.fingerprint = outcome.fingerprint;
        other.message = outcome.message;
      }
      ++other.count;
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

std::string outcome_label(const std::string& kind, const std::string& fingerprint) {
  return fingerprint.empty() ? kind : kind + " " + fingerprint;
}

std::string missing_working_dir_hint(const store::QuarantineEntry& entry) {
  if (entry.handler != "exec" || !entry.working_dir.empty()) return "";
  std::error_code ec;
  const std::string here = std::filesystem::current_path(ec).string();
  return "the record has no working directory (it was made by an older pillbox): its command ran here, in " +
         (ec ? std::string("this directory") : table_cell(here, 400)) +
         ", and relative paths on its command line named files here; run it again from the directory the record "
         "was made in";
}

std::string reproduce_verdict(const ReproduceResult& result) {
  if (result.matches > 0 && result.matches * 2 >= result.runs) return "reliable";
  std::size_t failed = result.matches;
  for (const auto& [what, other] : result.others) {
    if (other.kind != to_string(Kind::kOk)) failed += other.count;
  }
  return failed > 0 ? "flaky" : "not-reproduced";
}

Expected<ReproduceResult> reproduce_payload(const store::QuarantineEntry& entry, ChildConfig config,
                                            std::string payload, const ReproduceSettings& settings) {
  if (settings.runs == 0) return Error{"--runs must be at least 1"};
  RunSettings run = planned_run_settings(std::move(config), settings.mode, std::min(settings.jobs, settings.runs),
                                         settings.sandbox_binary);
  run.identity = entry.handler_identity;
  Repeats planner(entry, std::move(payload), settings);
  auto report = run_planned(run, planner);
  if (!report) return Error{report.error()};
  ReproduceResult result = std::move(planner.result());
  result.stop_signal = report->stop_signal;
  if (result.stop_signal == 0) result.verdict = reproduce_verdict(result);
  return result;
}

std::string reproduce_detail(const store::QuarantineEntry& entry, const ReproduceResult& result) {
  std::string detail = result.verdict + ": " + std::to_string(result.matches) + " of " + std::to_string(result.runs) +
                       " runs ended with " + entry.fingerprint;
  for (const auto& [what, other] : result.others) {
    detail += "; " + what + " x" + std::to_string(other.count) + " (run " + std::to_string(other.first_run) +
              (other.message.empty() ? "" : ": " + first_line(other.message, kDetailMessageBytes)) + ")";
  }
  if (!result.others.empty()) {
    if (const std::string hint = missing_working_dir_hint(entry); !hint.empty()) detail += "; " + hint;
  }
  return detail;
}

Expected<ReproduceResult> reproduce_record(QuarantineSource& quarantine, const SourcedRecord& r,
                                           const ReproduceSettings& settings) {
  if (settings.runs == 0) return Error{"--runs must be at least 1"};
  auto payload = quarantine.payload(r);
  if (!payload) return Error{payload.error(), payload.error_code()};
  auto config = recorded_config_of(r, settings.policy, settings.allowed);
  if (!config) return Error{config.error(), config.error_code()};
  auto result = reproduce_payload(r.record.entry, std::move(*config), std::move(payload->bytes), settings);
  if (!result || result->stop_signal != 0) return result;
  if (auto s = quarantine.record_reproduction(r, result->verdict, static_cast<std::int64_t>(result->runs),
                                              static_cast<std::int64_t>(result->matches), settings.actor,
                                              reproduce_detail(r.record.entry, *result));
      !s) {
    return Error{s.message(), s.code()};
  }
  return result;
}

}  // namespace pillbox
