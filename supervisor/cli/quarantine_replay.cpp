// pillbox quarantine replay: quarantined payloads run again in controlled
// batches, with brakes, on either quarantine (QuarantineSource::replay):
// here, for the store's (supervisor/ops/replay.h), or sent back to the
// fleet's workers (supervisor/broker/fleet_redrive.h).
#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>

#include "shared/failure_kind.h"
#include "supervisor/cli/child_options.h"
#include "supervisor/cli/commands.h"
#include "supervisor/cli/exit_code.h"
#include "supervisor/cli/path_options.h"
#include "supervisor/cli/progress.h"
#include "supervisor/cli/quarantine_print.h"
#include "supervisor/cli/quarantine_verbs.h"
#include "supervisor/cli/run_output.h"
#include "supervisor/io/result_files.h"
#include "supervisor/io/terminal_text.h"
#include "supervisor/ops/replay.h"
#include "supervisor/store/actor.h"

namespace pillbox::cli {
namespace {

// --NAME X, a number above 0 and at most `max`, into `field` when it is given.
template <class Field>
Status read_positive_number(const Args& args, const std::string& name, double max, Field& field) {
  const auto text = args.value(name);
  if (!text) return Status::ok();
  char* end = nullptr;
  errno = 0;
  const double v = std::strtod(text->c_str(), &end);
  if (text->empty() || *end != '\0' || errno != 0 || !(v > 0) || v > max) {
    return Status::error("--" + name + " expects a number above 0 and at most " +
                         std::to_string(static_cast<long>(max)) + ", got '" + *text + "'");
  }
  field = static_cast<Field>(v);
  return Status::ok();
}

// --jobs, and the fixed consumer the payloads run under instead of the
// recorded one: a new handler or command, a new policy.
Status read_replay_runner(const Args& args, ReplayRun& run) {
  if (auto s = read_jobs(args, run.jobs); !s) return s;
  auto choice = read_handler_choice(args);
  if (!choice) return Status::error(choice.error());
  run.handler = std::move(*choice);
  return read_record_policy_options(args, run.policy, run.allowed);
}

// Payloads sent back to the workers run under their own handler and
// policy: what a replay here takes to choose one has nothing to choose there.
Status refuse_runner_options(const Args& args) {
  for (const char* name : {"handler", "arg", "policy", "jobs", "timeout", "cpu", "memory", "max-output", "writable",
                           "share"}) {
    if (args.flag(name)) {
      return Status::error(std::string("--") + name +
                           " does not apply on the fleet (--redis, --amqp): replay puts the records back for the workers, and the "
                           "fleet's workers run them under their own handler and policy");
    }
  }
  if (args.has_dashdash()) {
    return Status::error("'--' (a command) does not apply on the fleet (--redis, --amqp): its workers run their own command");
  }
  return Status::ok();
}

// --dry-run: what would be replayed, changing nothing.
int show_replay_plan(QuarantineSource& source, const ReplayRun& run, bool json) {
  std::vector<std::string> skipped;
  auto plan = source.replay_plan(run, skipped);
  if (!plan) return quarantine_error(plan.error(), exit_code_for(plan.error_code()));
  std::vector<std::pair<nlohmann::json, const store::QuarantineRecord*>> rows;
  std::vector<std::int64_t> revisions;  // what each would run: its newest patch, or 0 for the original
  for (const auto& r : *plan) {
    rows.emplace_back(r.id, &r.record);
    revisions.push_back(r.revision);
  }
  print_replay_plan(rows, run.batch, skipped, json, revisions);
  return kExitOk;
}

// What a replay acts on: record IDs (read by the source's parse_id), or
// --fingerprint, --kind and/or --raise-site, or --all (exactly one of
// these; with --allowed, none is every allowed record), and --force or
// --allowed.
Status read_replay_selection(const Args& args, const QuarantineSource& source, ReplayRun& run) {
  for (const auto& text : args.positional()) {
    auto id = source.parse_id(text);
    if (!id) return Status::error(id.error());
    run.ids.push_back(*id);
  }
  run.filter.fingerprint = args.value("fingerprint");
  if (auto site = args.value("raise-site")) {
    if (auto s = check_raise_site_id(*site); !s) return s;
    run.filter.raise_site = *site;
  }
  if (auto k = args.value("kind")) {
    if (!kind_from_string(*k)) return Status::error("unknown kind '" + *k + "'");
    run.filter.kind = *k;
  }
  const bool all = args.flag("all");
  const bool filtered = run.filter.fingerprint || run.filter.kind || run.filter.raise_site;
  run.force = args.flag("force");
  run.allowed_only = args.flag("allowed");
  if (run.force && run.allowed_only) {
    return Status::error("--allowed takes only the records an operator allowed, --force any record: give one of the two");
  }
  const int selections = !run.ids.empty() + filtered + all;
  if (selections > 1 || (selections == 0 && !run.allowed_only)) {
    return Status::error("replay what? give record IDs, or --fingerprint FP, --kind K and/or --raise-site RS, or "
                         "--all (one of these), or --allowed (every record allowed to replay)");
  }
  return Status::ok();
}

// --batch, --rate, --stop-after and --max-failure-ratio: how fast it goes
// and when it stops.
Status read_replay_brakes(const Args& args, ReplayBrakes& brakes) {
  if (auto s = read_positive_number(args, "batch", 100000, brakes.batch); !s) return s;
  if (auto s = read_positive_number(args, "rate", 100000, brakes.rate); !s) return s;
  if (auto s = read_positive_number(args, "stop-after", 1'000'000, brakes.stop_after); !s) return s;
  if (auto v = args.value("max-failure-ratio")) {
    char* end = nullptr;
    const double f = std::strtod(v->c_str(), &end);
    if (v->empty() || *end != '\0' || !(f >= 0.0 && f < 1.0)) {
      return Status::error("--max-failure-ratio expects a fraction from 0 up to (not including) 1, e.g. 0.2; got '" +
                           *v + "'");
    }
    brakes.max_failure_ratio = f;
  }
  return Status::ok();
}

// What the replay did, on stderr, and the exit code.
int report_replay(const ReplayResult& result, bool write_errors) {
  // Why a record was skipped, and what was noticed, quote claims (a
  // state's waiting entry or lease, a letter's dedupe key): one line each,
  // their control bytes as '?', never a terminal's escape.
  for (const auto& s : result.skipped) {
    std::fprintf(stderr, "pillbox quarantine replay: skipped %s\n", table_cell(s, 0).c_str());
  }
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
  for (const auto& n : result.notices) std::fprintf(stderr, "pillbox quarantine replay: %s\n", table_cell(n, 0).c_str());
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

}  // namespace

int quarantine_replay(const RecordsContext& c) {
  const Args& args = c.args;
  const bool here = c.source.can().replays_here;
  if (!here) {
    if (auto s = refuse_runner_options(args); !s) return quarantine_error(s.message(), kExitUsage);
  }
  ReplayRun run;
  if (auto s = read_replay_selection(args, c.source, run); !s) return quarantine_error(s.message(), kExitUsage);
  if (auto s = read_replay_brakes(args, run); !s) return quarantine_error(s.message(), kExitUsage);
  if (here) {
    if (auto s = read_replay_runner(args, run); !s) return quarantine_error(s.message(), kExitUsage);
  } else {
    if (auto s = read_duration(args, "batch-timeout", 100, 24 * 3'600'000ull, run.batch_timeout); !s) {
      return quarantine_error(s.message(), kExitUsage);
    }
  }
  if (!c.source.can().replay_outputs && (args.flag("out") || args.flag("out-mode"))) {
    return quarantine_error("--out does not apply with --amqp: a replayed message's result goes where the workers "
                            "put any (its reply_to, else NAME.results), not to the replay",
                            kExitUsage);
  }
  auto out = read_result_files(args);
  if (!out) return quarantine_error(out.error(), kExitUsage);
  std::optional<ResultFiles> results = std::move(*out);
  run.name_results = results.has_value();
  run.actor = actor_name("quarantine replay");
  run.trust_unsigned = args.flag("trust-unsigned");

  if (args.flag("dry-run")) return show_replay_plan(c.source, run, args.flag("json"));

  // Results go where `run` would put them: a line or a JSON object each, and
  // the output of successful ones into --out.
  const bool json = args.flag("json");
  bool write_errors = false;
  Progress progress = Progress::on_stderr("replay", 0, args.flag("quiet"));
  run.on_progress = [&](std::size_t done, std::size_t total) {
    progress.set_total(total);
    progress.update(done);
    progress.show();
  };
  run.on_result = [&](const ReplayedRecord& r) {
    std::string file;
    if (r.verdict == store::ReplayVerdict::kResolved && results) {
      if (!r.output_omitted.empty()) {
        // An empty file would read as an empty output: said instead.
        std::fprintf(stderr, "pillbox quarantine replay: record %s: %s, so not in --out\n", id_text(r.id).c_str(),
                     r.output_omitted.c_str());
        write_errors = true;
      } else {
        file = write_result_file(*results, r.record.entry.key, r.outcome.output, "quarantine replay", write_errors,
                                 r.result_variant);
      }
    }
    progress.hide();  // the result goes above the progress line
    progress.count(r.verdict == store::ReplayVerdict::kResolved ? std::string("resolved")
                                                                : std::string(to_string(r.outcome.kind)));
    print_replay_result(r.id, r.record, r.outcome, r.verdict, json, file, r.revision,
                        r.verdict == store::ReplayVerdict::kResolved ? r.output_omitted : "");
  };
  auto result = c.source.replay(run);
  // Why it stopped, in the last progress line too: a program that follows
  // the JSON lines (PILLBOX_PROGRESS_FD, the console's jobs) reads it there.
  if (result && !result->stopped_because.empty()) progress.update(progress.done(), "stopped: " + result->stopped_because);
  progress.finish();
  if (!result) return quarantine_error(result.error(), exit_code_for(result.error_code()));
  return report_replay(*result, write_errors);
}

}  // namespace pillbox::cli
