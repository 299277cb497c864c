// pillbox minimize ID: the smallest payload that still fails the same way.
// Thin over supervisor/ops/minimize.h.
#include <cstdio>
#include <nlohmann/json.hpp>
#include <string>

#include "supervisor/cli/args.h"
#include "supervisor/cli/child_options.h"
#include "supervisor/cli/commands.h"
#include "supervisor/cli/exit_code.h"
#include "supervisor/cli/fleet_key_option.h"
#include "supervisor/cli/progress.h"
#include "supervisor/cli/quarantine_print.h"
#include "supervisor/cli/quarantine_verbs.h"
#include "supervisor/ops/minimize.h"
#include "supervisor/store/actor.h"

namespace pillbox::cli {
namespace {

const char* kHelp =
    "usage: pillbox minimize ID [--jobs N] [--max-runs N] [--max-time DURATION] [--restart] [--json]\n"
    "                          [--policy P] [--timeout D] [--cpu D] [--memory S] [--max-output S]\n"
    "                          [--writable PATH] [--share PATH]\n"
    "                          [--store DIR | --redis URL --stream NAME | --amqp URL --queue NAME |\n"
    "                           --kafka BROKERS --topic T]\n"
    "\n"
    "Shrinks quarantine record ID's payload while it still fails the same way: the same\n"
    "fingerprint (for cpu-limit, wall-timeout and oom, the same kind). Blocks are deleted from\n"
    "large to small, then the bytes left are simplified, each to '0' (like afl-tmin). Every\n"
    "candidate runs in the sandbox under the record's handler and policy, --jobs at once.\n"
    "The smallest payload found is kept beside the original (pillbox quarantine export ID\n"
    "--minimized -o FILE). Progress is saved after every improvement (on RabbitMQ and Kafka at most every\n"
    "5 s): after SIGINT, SIGKILL, or when a budget runs out, the same command resumes from the\n"
    "best payload saved.\n"
    "\n"
    "options:\n"
    "  --jobs N            candidates at once (default: number of cores)\n"
    "  --max-runs N        runs in all, over every session of this record (default 5000)\n"
    "  --max-time DURATION time in all, likewise (default 5m; units ms, s, m, h, d)\n"
    "  --restart           forget earlier progress and start again from the original\n"
    "  --policy P          the policy to run it under: a shipped name (exec, strict) or a policy file of\n"
    "                      yours. Without it, the record's policy text is a claim: it runs under the shipped\n"
    "                      policy it names, with the limits and --writable/--share paths it was recorded\n"
    "                      with, or not at all (docs/security.md, \"What a record may and may not decide\")\n"
    "  --timeout D, --cpu D, --memory S, --max-output S, --writable PATH, --share PATH\n"
    "                      as for run: a record's limit above its shipped policy's, or a host path it\n"
    "                      binds, is taken only when given here again; with --policy, they change it\n"
    "  --handler plugin:PATH  a record whose handler is a plugin runs only when you name it again\n"
    "  --json              the result as one JSON object\n"
    "  -q, --quiet         no progress bar on the terminal\n"
    "  --store DIR         the store (default: $PILLBOX_STORE, else $XDG_STATE_HOME/pillbox, else\n"
    "                      ~/.local/state/pillbox)\n"
    "  --redis URL --stream NAME\n"
    "                      a record of the fleet's quarantine instead (the workers' dead letters in\n"
    "                      NAME:dlq, see pillbox quarantine --help); it runs here, and its progress and\n"
    "                      minimized payload are kept with the record on Redis. It runs only when its\n"
    "                      signature is valid: --fleet-key FILE (default $PILLBOX_FLEET_KEY) is the key\n"
    "                      the workers sign with; --trust-unsigned runs an unsigned one anyway\n"
    "  --amqp URL --queue NAME\n"
    "                      a record of the fleet's quarantine on RabbitMQ (the dead letters in the\n"
    "                      stream NAME.dlq, their offsets as IDs), alike: its progress is kept in\n"
    "                      NAME.dlq.state, the best payload so far and the minimized one in the\n"
    "                      stream NAME.dlq.minimized\n"
    "  --kafka BROKERS --topic T\n"
    "                      a record of the fleet's quarantine on Kafka (the dead letters in the topic\n"
    "                      T.dlq, PARTITION@OFFSET as IDs), alike: its progress is kept in the topic\n"
    "                      T.dlq.state, the best payload so far and the minimized one in the topic\n"
    "                      T.dlq.minimized (one partition; not created by pillbox: the error says how)\n"
    "\n"
    "exit codes: 0 done (finished, or a budget ran out: see \"finished\"), 2 usage error, no such\n"
    "record, or a payload that does not fail the same way now, 3 the store, the broker or the sandbox\n"
    "cannot be used, 130/143 stopped by SIGINT/SIGTERM (progress kept)\n";

int fail(const std::string& message, int code) { return command_error("minimize", message, code); }

// What the session came to, on stdout, and the exit code. `id` as the
// quarantine verbs print it; `export_hint` the command that writes the result.
int report(const Args& args, const nlohmann::json& id, const MinimizeResult& result, const std::string& export_hint) {
  if (args.flag("json")) {
    const nlohmann::json j = {{"id", id},
                              {"original_size", result.original_size},
                              {"minimized_size", result.minimized_size},
                              {"minimized_sha256", result.minimized_sha256},
                              {"runs", result.runs},
                              {"runs_this_session", result.runs_now},
                              {"elapsed_ms", result.elapsed_ms},
                              {"finished", result.finished},
                              {"resumed", result.resumed},
                              {"stopped_by", result.stopped_by}};
    std::printf("%s\n", j.dump().c_str());
  } else {
    std::printf("record %s: %zu -> %zu bytes in %lld runs (%.1f s)%s%s\n", id_text(id).c_str(), result.original_size,
                result.minimized_size, static_cast<long long>(result.runs),
                static_cast<double>(result.elapsed_ms) / 1000.0, result.resumed ? ", resumed" : "",
                result.finished ? "" : (", not finished: stopped by " + result.stopped_by +
                                        "; run the same command again to go on").c_str());
    if (result.minimized_size < result.original_size) std::printf("  %s writes it\n", export_hint.c_str());
  }
  return result.stop_signal != 0 ? 128 + result.stop_signal : kExitOk;
}

// Runs against --max-runs (counting earlier sessions'), and the best size
// so far. (--max-time counts earlier sessions' time too, which this process
// does not know: the ETA follows the runs.)
void show_progress(MinimizeSettings& settings, Progress& progress) {
  settings.on_progress = [&progress, first = true](std::int64_t runs, std::size_t best) mutable {
    // Each call is one run ending: the first call says how many runs earlier
    // sessions made, which count toward the budget but not the rate.
    if (first && runs > 0) progress.set_done_before(static_cast<std::size_t>(runs - 1));
    first = false;
    progress.update(static_cast<std::size_t>(runs), "best " + std::to_string(best) + " bytes");
  };
}

}  // namespace

int minimize_command(int argc, char** argv) {
  std::vector<OptionSpec> options = {{"jobs"},         {"max-runs"}, {"max-time"}, {"restart", false},
                                     {"json", false},  {"policy"},   {"store"},    {"redis"},
                                     {"stream"},       {"amqp"},     {"queue"},    {"kafka"},
                                     {"topic"},        {"quiet", false}, {"help", false}};
  options.insert(options.end(), kFleetKeyOptions.begin(), kFleetKeyOptions.end());
  options.insert(options.end(), kRecordAllowanceOptions.begin(), kRecordAllowanceOptions.end());
  options.push_back({"handler"});  // a plugin record's handler, said again (record_policy.h)
  int exit_code = kExitOk;
  auto args = parse_command(argc, argv, 2, options, "minimize", kHelp, exit_code);
  if (!args) return exit_code;
  MinimizeSettings settings;
  if (auto s = read_jobs(*args, settings.jobs); !s) return fail(s.message(), kExitUsage);
  if (auto s = read_whole_number(*args, "max-runs", 1, 100'000'000, settings.max_runs); !s) {
    return fail(s.message(), kExitUsage);
  }
  if (auto s = read_duration(*args, "max-time", 100, 30ull * 24 * 3600 * 1000, settings.max_time); !s) {
    return fail(s.message(), kExitUsage);
  }
  settings.restart = args->flag("restart");
  settings.actor = actor_name("minimize");
  if (auto s = read_record_policy_options(*args, settings.policy, settings.allowed); !s) {
    return fail(s.message(), kExitUsage);
  }
  // The record, in the store or the fleet's quarantine: it runs here, and
  // its progress and result are kept with it.
  auto opened = open_one_record(*args);
  if (!opened) return fail(opened.error(), exit_code_for(opened.error_code()));
  const SourcedRecord& r = opened->record;
  Progress progress = Progress::on_stderr("minimize " + r.id_text(), static_cast<std::size_t>(settings.max_runs),
                                          args->flag("quiet"));
  show_progress(settings, progress);
  auto result = minimize_record(*opened->source, r, settings);
  progress.finish();
  if (!result) {
    // A record's own errors name it already (recorded_config_of).
    const std::string named = "record " + r.id_text() + ": ";
    return fail(result.error().rfind(named, 0) == 0 ? result.error() : named + result.error(),
                exit_code_for(result.error_code()));
  }
  return report(*args, r.id, *result,
                "pillbox quarantine export " + r.id_text() + " --minimized -o FILE" + opened->source->hint_options());
}

}  // namespace pillbox::cli
