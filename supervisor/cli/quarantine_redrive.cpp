// pillbox quarantine replay --redis URL --stream NAME: the fleet's records
// redriven to its workers in batches, with the store's replay's brakes and
// output. Thin over supervisor/broker/fleet_redrive.h.
#include <cstdio>
#include <optional>
#include <string>

#include "shared/failure_kind.h"
#include "supervisor/broker/fleet_redrive.h"
#include "supervisor/cli/commands.h"
#include "supervisor/cli/exit_code.h"
#include "supervisor/cli/path_options.h"
#include "supervisor/cli/progress.h"
#include "supervisor/cli/quarantine_print.h"
#include "supervisor/cli/quarantine_verbs.h"
#include "supervisor/io/terminal_text.h"
#include "supervisor/store/actor.h"

namespace pillbox::cli {
namespace {

// The workers run the records under their own handler and policy: what
// the store's replay takes to choose one has nothing to choose here.
Status refuse_runner_options(const Args& args) {
  for (const char* name : {"handler", "arg", "policy", "jobs", "timeout", "cpu", "memory", "max-output", "writable",
                           "share"}) {
    if (args.flag(name)) {
      return Status::error(std::string("--") + name +
                           " does not apply with --redis: replay puts the records back on the stream, and the "
                           "fleet's workers run them under their own handler and policy");
    }
  }
  if (args.has_dashdash()) {
    return Status::error("'--' (a command) does not apply with --redis: the fleet's workers run their own command");
  }
  return Status::ok();
}

// The store's replay's brakes, read by its reader, and --batch-timeout.
Status read_brakes(const Args& args, broker::RedriveSettings& s) {
  ReplaySettings brakes;
  if (auto st = read_replay_brakes(args, brakes); !st) return st;
  s.batch = brakes.batch;
  s.rate = brakes.rate;
  s.stop_after = brakes.stop_after;
  s.max_failure_ratio = brakes.max_failure_ratio;
  auto timeout = read_duration(args, "batch-timeout", s.batch_timeout, 100, 24 * 3'600'000ull);
  if (!timeout) return Status::error(timeout.error());
  s.batch_timeout = *timeout;
  return Status::ok();
}

int show_plan(const FleetContext& c, const broker::RedriveSettings& settings) {
  std::vector<std::string> skipped;
  auto plan = broker::redrive_plan(c.quarantine, settings, skipped);
  if (!plan) return quarantine_error(plan.error(), exit_code_for(plan.error_code()));
  std::vector<std::pair<nlohmann::json, const store::QuarantineRecord*>> rows;
  for (const auto& r : *plan) rows.emplace_back(r.id, &r.record);
  print_replay_plan(rows, settings.batch, skipped, c.args.flag("json"));
  return kExitOk;
}

}  // namespace

int fleet_replay(const FleetContext& c) {
  const Args& args = c.args;
  if (auto s = refuse_runner_options(args); !s) return quarantine_error(s.message(), kExitUsage);
  broker::RedriveSettings settings;
  if (auto s = read_replay_selection(args, broker::parse_fleet_id, settings); !s) return quarantine_error(s.message(), kExitUsage);
  if (auto s = read_brakes(args, settings); !s) return quarantine_error(s.message(), kExitUsage);
  auto out = read_result_files(args);
  if (!out) return quarantine_error(out.error(), kExitUsage);
  std::optional<ResultFiles> results = std::move(*out);
  settings.actor = actor_name("quarantine replay");
  settings.trust_unsigned = args.flag("trust-unsigned");

  if (args.flag("dry-run")) return show_plan(c, settings);

  // Results are printed as the store's replay prints them, and the output of
  // ok ones goes into --out.
  const bool json = args.flag("json");
  bool write_errors = false;
  Progress progress = Progress::on_stderr("replay", 0, c.args.flag("quiet"));
  settings.on_progress = [&](std::size_t done, std::size_t total) {
    progress.set_total(total);
    progress.update(done);
    progress.show();
  };
  settings.on_result = [&](const broker::FleetRecord& r, const broker::RedriveOutcome& o,
                           store::ReplayVerdict verdict) {
    std::string file;
    if (verdict == store::ReplayVerdict::kResolved && results) {
      if (!o.output_omitted.empty()) {
        // An empty file would read as an empty output: said instead.
        std::fprintf(stderr, "pillbox quarantine replay: record %s: its output is not in %s (%s), so not in --out\n",
                     r.id.c_str(), c.quarantine.keys().stream.results.c_str(), table_cell(o.output_omitted, 200).c_str());
        write_errors = true;
      } else {
        file = write_result_file(*results, r.record.entry.key, o.outcome.output, "quarantine replay", write_errors);
      }
    }
    progress.hide();  // the result goes above the progress line
    progress.count(verdict == store::ReplayVerdict::kResolved ? std::string("resolved")
                                                              : std::string(to_string(o.outcome.kind)));
    print_replay_result(r.id, r.record, o.outcome, verdict, json, file);
  };
  auto result = broker::redrive(c.quarantine, settings);
  progress.finish();
  if (!result) return quarantine_error(result.error(), exit_code_for(result.error_code()));
  return report_replay(result->replay, write_errors);
}

}  // namespace pillbox::cli
