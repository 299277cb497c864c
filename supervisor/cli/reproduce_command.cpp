// pillbox reproduce ID [--runs N]: does a quarantined payload still fail the
// same way, every time or only sometimes? Thin over supervisor/ops/reproduce.h.
#include <cstdio>
#include <nlohmann/json.hpp>
#include <string>

#include "shared/failure_kind.h"
#include "supervisor/cli/args.h"
#include "supervisor/cli/child_options.h"
#include "supervisor/cli/commands.h"
#include "supervisor/cli/exit_code.h"
#include "supervisor/cli/fleet_key_option.h"
#include "supervisor/cli/progress.h"
#include "supervisor/cli/quarantine_print.h"
#include "supervisor/cli/quarantine_verbs.h"
#include "supervisor/exec/stop_signals.h"
#include "supervisor/io/terminal_text.h"
#include "supervisor/ops/reproduce.h"
#include "supervisor/store/actor.h"

namespace pillbox::cli {
namespace {

const char* kHelp =
    "usage: pillbox reproduce ID [--runs N] [--jobs N] [--json] [--policy P] [--timeout D] [--cpu D]\n"
    "                            [--memory S] [--max-output S] [--writable PATH] [--share PATH]\n"
    "                            [--store DIR | --redis URL --stream NAME | --amqp URL --queue NAME |\n"
    "                             --kafka BROKERS --topic T]\n"
    "\n"
    "Runs quarantine record ID's payload N times (default 5) in the sandbox, under the handler\n"
    "and policy it was quarantined with, and counts the runs that end with its fingerprint.\n"
    "At least half of them: `reliable`; fewer, but some run failed: `flaky`; every run ok:\n"
    "`not-reproduced` (\"not reproduced (0 of N)\"). The verdict is kept in the record\n"
    "(pillbox quarantine show ID) with an audit entry. SIGINT stops it; nothing is recorded then.\n"
    "\n"
    "options:\n"
    "  --runs N    how many runs (1 to 10000, default 5)\n"
    "  --jobs N    runs at once (default: number of cores)\n"
    "  --json      the result as one JSON object\n"
    "  --policy P  the policy to run it under: a shipped name (exec, strict) or a policy file of\n"
    "              yours. Without it, the record's policy text is a claim: it runs under the shipped\n"
    "              policy it names, with the limits and --writable/--share paths it was recorded\n"
    "              with, or not at all (docs/security.md, \"What a record may and may not decide\")\n"
    "  --timeout D, --cpu D, --memory S, --max-output S, --writable PATH, --share PATH\n"
    "              as for run: a record's limit above its shipped policy's, or a host path it binds,\n"
    "              is taken only when given here again (else the record is refused and the error\n"
    "              names the flag); with --policy, they change that policy\n"
    "  --handler plugin:PATH\n"
    "              a record whose handler is a plugin runs only when you name that plugin again\n"
    "  -q, --quiet no progress bar on the terminal\n"
    "  --store DIR the store (default: $PILLBOX_STORE, else $XDG_STATE_HOME/pillbox, else\n"
    "              ~/.local/state/pillbox)\n"
    "  --redis URL --stream NAME\n"
    "              a record of the fleet's quarantine instead (the workers' dead letters in NAME:dlq,\n"
    "              see pillbox quarantine --help); it runs here, under the handler and policy the\n"
    "              record names, and the verdict is kept with the record on Redis. It runs only\n"
    "              when its signature is valid: --fleet-key FILE (default $PILLBOX_FLEET_KEY) is the\n"
    "              key the workers sign with; --trust-unsigned runs an unsigned one anyway\n"
    "  --amqp URL --queue NAME\n"
    "              a record of the fleet's quarantine on RabbitMQ (the dead letters in the stream\n"
    "              NAME.dlq, their offsets as IDs), alike; the verdict is kept in NAME.dlq.state\n"
    "  --kafka BROKERS --topic T\n"
    "              a record of the fleet's quarantine on Kafka (the dead letters in the topic T.dlq,\n"
    "              PARTITION@OFFSET as IDs), alike; the verdict is kept in the topic T.dlq.state\n"
    "\n"
    "exit codes: 0 its fingerprint came back (reliable or flaky), 1 it did not in any run (flaky with\n"
    "other failures only, or not reproduced), 2 usage error or\n"
    "no such record, 3 the store, Redis or the sandbox cannot be used, 130/143 stopped by SIGINT/SIGTERM\n";

int fail(const std::string& message, int code) { return command_error("reproduce", message, code); }

// What the runs came to, on stdout, and the exit code. `id` as the
// quarantine verbs print it: the store's number, the fleet's entry id.
int report(const Args& args, const nlohmann::json& id, const store::QuarantineRecord& record,
           const ReproduceResult& result, std::size_t asked) {
  if (result.stop_signal != 0) {
    std::fprintf(stderr, "pillbox reproduce: stopped by %s after %zu of %zu runs; nothing recorded\n",
                 stop_signal_name(result.stop_signal), result.runs, asked);
    return 128 + result.stop_signal;
  }
  const std::string& fp = record.entry.fingerprint;
  const std::string hint = result.others.empty() ? "" : missing_working_dir_hint(record.entry);
  if (args.flag("json")) {
    nlohmann::json others = nlohmann::json::array();
    for (const auto& [what, o] : result.others) {
      others.push_back({{"outcome", what},
                        {"count", o.count},
                        {"kind", o.kind},
                        {"fingerprint", o.fingerprint.empty() ? nlohmann::json(nullptr) : nlohmann::json(o.fingerprint)},
                        {"first_run", o.first_run},
                        {"message", o.message}});
    }
    nlohmann::json j = {{"id", id},           {"fingerprint", fp},      {"kind", record.entry.kind},
                        {"runs", result.runs}, {"matches", result.matches}, {"verdict", result.verdict},
                        {"other_outcomes", others}};
    if (!hint.empty()) j["hint"] = hint;
    std::printf("%s\n", j.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace).c_str());
  } else {
    if (result.verdict == "not-reproduced") {
      std::printf("record %s: not reproduced (0 of %zu): every run ended ok; the payload no longer fails here "
                  "(pillbox quarantine replay %s resolves it)\n",
                  id_text(id).c_str(), result.runs, id_text(id).c_str());
    } else {
      std::printf("record %s: %s: %zu of %zu runs ended with %s (%s)\n", id_text(id).c_str(), result.verdict.c_str(),
                  result.matches, result.runs, fp.c_str(), record.entry.kind.c_str());
    }
    // Each other outcome once, with the words of its first run: what the
    // payload fails of now. The message is the child's: made inert.
    for (const auto& [what, o] : result.others) {
      std::string line = "  run " + std::to_string(o.first_run) + ": " + record.entry.kind + " " + fp +
                         " expected; got " + what;
      if (!o.message.empty()) line += ": " + table_cell(o.message, 300);
      if (o.count > 1) line += " (" + std::to_string(o.count) + " runs ended so)";
      std::printf("%s\n", line.c_str());
    }
    if (!hint.empty()) std::printf("  note: %s\n", table_cell(hint, 1000).c_str());
  }
  return result.matches > 0 ? kExitOk : kExitFailures;
}

}  // namespace

int reproduce_command(int argc, char** argv) {
  std::vector<OptionSpec> options = {{"runs"},  {"jobs"},   {"json", false}, {"store"}, {"policy"},
                                     {"redis"}, {"stream"}, {"amqp"}, {"queue"}, {"kafka"}, {"topic"}, {"quiet", false}, {"help", false}};
  options.insert(options.end(), kFleetKeyOptions.begin(), kFleetKeyOptions.end());
  options.insert(options.end(), kRecordAllowanceOptions.begin(), kRecordAllowanceOptions.end());
  options.push_back({"handler"});  // a plugin record's handler, said again (record_policy.h)
  int exit_code = kExitOk;
  auto args = parse_command(argc, argv, 2, options, "reproduce", kHelp, exit_code);
  if (!args) return exit_code;
  ReproduceSettings settings;
  if (auto s = read_whole_number(*args, "runs", 1, 10000, settings.runs); !s) return fail(s.message(), kExitUsage);
  if (auto s = read_jobs(*args, settings.jobs); !s) return fail(s.message(), kExitUsage);
  settings.actor = actor_name("reproduce");
  if (auto s = read_record_policy_options(*args, settings.policy, settings.allowed); !s) {
    return fail(s.message(), kExitUsage);
  }
  // The record, in the store or the fleet's quarantine: it runs here, and
  // its verdict is kept with it.
  auto opened = open_one_record(*args);
  if (!opened) return fail(opened.error(), exit_code_for(opened.error_code()));
  const SourcedRecord& r = opened->record;
  Progress progress = Progress::on_stderr("reproduce " + r.id_text(), settings.runs, args->flag("quiet"));
  settings.on_progress = [&](std::size_t done, const Outcome& last) {
    if (last.kind != Kind::kOk) progress.count(std::string(to_string(last.kind)));
    progress.update(done);
  };
  auto result = reproduce_record(*opened->source, r, settings);
  progress.finish();
  // A record this machine will not run as it stands is a usage error (2).
  if (!result) return fail(result.error(), exit_code_for(result.error_code()));
  return report(*args, r.id, r.record, *result, settings.runs);
}

}  // namespace pillbox::cli
