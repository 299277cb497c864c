// pillbox quarantine replay: quarantined payloads run again in controlled
// batches, with brakes. Thin over supervisor/replay.h.
#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <thread>

#include "shared/failure_kind.h"
#include "supervisor/cli/child_options.h"
#include "supervisor/cli/commands.h"
#include "supervisor/cli/exit_code.h"
#include "supervisor/cli/path_options.h"
#include "supervisor/cli/progress.h"
#include "supervisor/cli/quarantine_print.h"
#include "supervisor/cli/quarantine_verbs.h"
#include "supervisor/cli/run_output.h"
#include "supervisor/exec/stop_signals.h"
#include "supervisor/io/result_files.h"
#include "supervisor/io/terminal_text.h"
#include "supervisor/ops/replay.h"
#include "supervisor/store/actor.h"
#include "supervisor/store/quarantine_json.h"
#include "supervisor/store/replay_store.h"
#include "supervisor/store/result_store.h"
#include "supervisor/store/revision_store.h"

namespace pillbox::cli {
namespace {

Expected<double> positive_number(const std::string& name, const std::string& text, double max) {
  char* end = nullptr;
  errno = 0;
  const double v = std::strtod(text.c_str(), &end);
  if (text.empty() || *end != '\0' || errno != 0 || !(v > 0) || v > max) {
    return Error{"--" + name + " expects a number above 0 and at most " + std::to_string(static_cast<long>(max)) +
                 ", got '" + text + "'"};
  }
  return v;
}

// --jobs, and the fixed consumer the payloads run under instead of the
// recorded one: a new handler or command, a new policy.
Status read_replay_runner(const Args& args, ReplaySettings& settings) {
  auto jobs = read_jobs(args);
  if (!jobs) return Status::error(jobs.error());
  settings.jobs = *jobs;
  auto choice = read_handler_choice(args);
  if (!choice) return Status::error(choice.error());
  settings.handler = std::move(*choice);
  return read_record_policy_options(args, settings.policy, settings.allowed);
}

// --dry-run: what would be replayed, changing nothing.
int show_replay_plan(store::ReplayStore& replays, const ReplaySettings& settings, bool json) {
  std::vector<std::string> skipped;
  auto plan = replay_plan(replays, settings, skipped);
  if (!plan) return quarantine_error(plan.error(), exit_code_for(plan.error_code()));
  std::vector<std::pair<nlohmann::json, const store::QuarantineRecord*>> rows;
  std::vector<std::int64_t> revisions;  // what each would run: its newest patch, or 0 for the original
  store::RevisionStore patches(replays.database());
  for (const auto& r : *plan) {
    rows.emplace_back(r.id, &r);
    auto newest = patches.latest(r.id);
    if (!newest) return quarantine_error(newest.error(), kExitSetup);
    revisions.push_back(*newest ? (*newest)->n : 0);
  }
  print_replay_plan(rows, settings.batch, skipped, json, revisions);
  return kExitOk;
}

}  // namespace

// --batch, --rate, --stop-after and --max-failure-ratio: how fast it goes
// and when it stops.
Status read_replay_brakes(const Args& args, ReplaySettings& settings) {
  if (auto v = args.value("batch")) {
    auto n = positive_number("batch", *v, 100000);
    if (!n) return Status::error(n.error());
    settings.batch = static_cast<std::size_t>(*n);
  }
  if (auto v = args.value("rate")) {
    auto n = positive_number("rate", *v, 100000);
    if (!n) return Status::error(n.error());
    settings.rate = *n;
  }
  if (auto v = args.value("stop-after")) {
    auto n = positive_number("stop-after", *v, 1'000'000);
    if (!n) return Status::error(n.error());
    settings.stop_after = static_cast<std::size_t>(*n);
  }
  if (auto v = args.value("max-failure-ratio")) {
    char* end = nullptr;
    const double f = std::strtod(v->c_str(), &end);
    if (v->empty() || *end != '\0' || !(f >= 0.0 && f < 1.0)) {
      return Status::error("--max-failure-ratio expects a fraction from 0 up to (not including) 1, e.g. 0.2; got '" +
                           *v + "'");
    }
    settings.max_failure_ratio = f;
  }
  return Status::ok();
}

// What the replay did, on stderr, and the exit code.
int report_replay(const ReplayResult& result, bool write_errors) {
  for (const auto& s : result.skipped) std::fprintf(stderr, "pillbox quarantine replay: skipped %s\n", s.c_str());
  if (result.recovered > 0) {
    std::fprintf(stderr, "pillbox quarantine replay: took back %zu records from a replay that is gone\n", result.recovered);
  }
  if (result.earlier_outcomes > 0) {
    std::fprintf(stderr,
                 "pillbox quarantine replay: %zu record%s had been redriven by an earlier replay that did not record "
                 "how %s ended; the outcome%s found in the fleet's results and dead letters %s recorded, not redriven "
                 "again\n",
                 result.earlier_outcomes, result.earlier_outcomes == 1 ? "" : "s",
                 result.earlier_outcomes == 1 ? "it" : "they", result.earlier_outcomes == 1 ? "" : "s",
                 result.earlier_outcomes == 1 ? "is" : "are");
  }
  for (const auto& n : result.notices) std::fprintf(stderr, "pillbox quarantine replay: %s\n", n.c_str());
  std::fprintf(stderr, "replay: %zu selected, %zu replayed: %zu resolved, %zu failed again; %zu left as they were%s\n",
               result.selected, result.replayed, result.resolved, result.failed_again, result.not_replayed,
               result.taken_by_others > 0
                   ? (" (" + std::to_string(result.taken_by_others) + " taken by another replay)").c_str()
                   : "");
  if (!result.stopped_because.empty()) std::fprintf(stderr, "replay stopped: %s\n", result.stopped_because.c_str());
  if (result.stop_signal != 0) return 128 + result.stop_signal;
  if (write_errors) return kExitUsage;
  // A payload the store cannot give back is the store's fault, not the record's.
  if (result.unreadable > 0) return kExitSetup;
  return result.failed_again > 0 || !result.stopped_because.empty() ? kExitFailures : kExitOk;
}

int quarantine_replay(const QuarantineContext& c) {
  const Args& args = c.args;
  ReplaySettings settings;
  if (auto s = read_replay_selection(args, parse_record_id, settings.selection); !s) return quarantine_error(s.message(), kExitUsage);
  if (auto s = read_replay_brakes(args, settings); !s) return quarantine_error(s.message(), kExitUsage);
  if (auto s = read_replay_runner(args, settings); !s) return quarantine_error(s.message(), kExitUsage);
  auto out = read_result_files(args);
  if (!out) return quarantine_error(out.error(), kExitUsage);
  std::optional<ResultFiles> results = std::move(*out);
  settings.actor = actor_name("quarantine replay");
  store::ReplayStore replays(c.database, c.quarantine);
  std::optional<store::ResultStore> result_store;  // how its -o names a result (fleet replays have none)
  if (auto opened = store::ResultStore::open(c.database)) result_store.emplace(std::move(*opened));

  if (args.flag("dry-run")) return show_replay_plan(replays, settings, args.flag("json"));

  // Results go where `run` would put them: a line or a JSON object each, and
  // the output of successful ones into --out.
  const bool json = args.flag("json");
  bool write_errors = false;
  Progress progress = Progress::on_stderr("replay", 0, c.args.flag("quiet"));
  settings.on_progress = [&](std::size_t done, std::size_t total) {
    progress.set_total(total);
    progress.update(done);
    progress.show();
  };
  settings.on_result = [&](const store::QuarantineRecord& r, const Outcome& o, store::ReplayVerdict verdict,
                           std::int64_t revision) {
    std::string file;
    if (verdict == store::ReplayVerdict::kResolved && results) {
      // Named as `run --out` names this task's result: KEY~HASH.out when an
      // earlier task has the key with another payload (never over its file).
      std::string reused;
      if (result_store) {
        auto sha = result_store->reused_key_payload(r.entry.task_id);
        if (sha) reused = *sha;
      }
      file = write_result_file(*results, r.entry.key, o.output, "quarantine replay", write_errors,
                               reused.empty() ? std::string_view{} : result_variant(reused));
    }
    progress.hide();  // the result goes above the progress line
    progress.count(verdict == store::ReplayVerdict::kResolved ? std::string("resolved")
                                                              : std::string(to_string(o.kind)));
    print_replay_result(r.id, r, o, verdict, json, file, revision);
  };
  // For the whole replay, not only while payloads run (payload_runner's
  // own): SIGTERM between two batches (a console job stopped, its serve
  // gone) would otherwise kill it with the next batch's records claimed.
  // The batch after it sees the signal at once and stops; its claims go back.
  auto result = [&] {
    StopSignals whole_replay;
    return replay(c.quarantine, replays, settings);
  }();
  // Why it stopped, in the last progress line too: a program that follows
  // the JSON lines (PILLBOX_PROGRESS_FD, the console's jobs) reads it there.
  if (result && !result->stopped_because.empty()) progress.update(progress.done(), "stopped: " + result->stopped_because);
  progress.finish();
  if (!result) {
    return quarantine_error(result.error(), exit_code_for(result.error_code()));
  }
  return report_replay(*result, write_errors);
}

}  // namespace pillbox::cli
