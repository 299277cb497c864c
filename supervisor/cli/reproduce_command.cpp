// pillbox reproduce ID [--runs N]: does a quarantined payload still fail the
// same way, every time or only sometimes? Thin over supervisor/reproduce.h.
#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <nlohmann/json.hpp>
#include <string>
#include <thread>

#include "supervisor/store/actor.h"
#include "supervisor/cli/args.h"
#include "supervisor/cli/commands.h"
#include "supervisor/cli/quarantine_verbs.h"
#include "supervisor/cli/store_access.h"
#include "supervisor/flow/progress.h"
#include "supervisor/ops/reproduce.h"
#include "supervisor/exec/stop_signals.h"

namespace pillbox::cli {
namespace {

const char* kHelp =
    "usage: pillbox reproduce ID [--runs N] [--jobs N] [--json] [--store DIR]\n"
    "\n"
    "Runs quarantine record ID's payload N times (default 5) in the sandbox, under the handler\n"
    "and policy it was quarantined with, and counts the runs that end with its fingerprint.\n"
    "At least half of them: `reliable`; fewer: `flaky`. The verdict is kept in the record\n"
    "(pillbox quarantine show ID) with an audit entry. SIGINT stops it; nothing is recorded then.\n"
    "\n"
    "options:\n"
    "  --runs N    how many runs (1 to 10000, default 5)\n"
    "  --jobs N    runs at once (default: number of cores)\n"
    "  --json      the result as one JSON object\n"
    "  --store DIR the store (default: $PILLBOX_STORE, else $XDG_STATE_HOME/pillbox)\n"
    "\n"
    "exit codes: 0 reproduced (reliable or flaky), 1 not reproduced in any run, 2 usage error or\n"
    "no such record, 3 the store or the sandbox cannot be used, 130/143 stopped by SIGINT/SIGTERM\n";

int fail(const std::string& message, int code) {
  std::fprintf(stderr, "pillbox reproduce: %s\n", message.c_str());
  return code;
}

}  // namespace

int reproduce_command(int argc, char** argv) {
  const std::vector<OptionSpec> options = {{"runs"}, {"jobs"}, {"json", false}, {"store"}, {"help", false}};
  auto args = Args::parse(argc, argv, 2, options, "reproduce");
  if (!args) return fail(args.error(), kExitUsage);
  if (args->flag("help")) {
    std::fputs(kHelp, stdout);
    return kExitOk;
  }
  auto id = read_one_record_id(*args);
  if (!id) return fail(id.error(), kExitUsage);
  ReproduceSettings settings;
  if (auto s = read_whole_number(*args, "runs", 1, 10000, settings.runs); !s) return fail(s.message(), kExitUsage);
  auto jobs = read_jobs(*args);
  if (!jobs) return fail(jobs.error(), kExitUsage);
  settings.jobs = *jobs;
  settings.actor = actor_name("reproduce");

  StoreAccessError error;
  auto opened = open_record(*args, *id, error);
  if (!opened) return fail(error.message, error.exit_code);
  const store::QuarantineRecord& record = opened->record;

  Progress progress = Progress::on_stderr("reproduce " + std::to_string(*id), settings.runs);
  settings.on_progress = [&](std::size_t done) { progress.update(done); };
  auto result = reproduce_record(*opened->access->quarantine, *id, settings);
  progress.finish();
  if (!result) return fail(result.error(), kExitSetup);
  if (result->stop_signal != 0) {
    std::fprintf(stderr, "pillbox reproduce: stopped by %s after %zu of %zu runs; nothing recorded\n",
                 stop_signal_name(result->stop_signal), result->runs, settings.runs);
    return 128 + result->stop_signal;
  }
  const std::string& fp = record.entry.fingerprint;
  if (args->flag("json")) {
    nlohmann::json others = nlohmann::json::array();
    for (const auto& [what, n] : result->others) others.push_back({{"outcome", what}, {"count", n}});
    const nlohmann::json j = {{"id", *id},           {"fingerprint", fp},      {"kind", record.entry.kind},
                              {"runs", result->runs}, {"matches", result->matches}, {"verdict", result->verdict},
                              {"other_outcomes", others}};
    std::printf("%s\n", j.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace).c_str());
  } else {
    std::printf("record %lld: %s: %zu of %zu runs ended with %s (%s)\n", static_cast<long long>(*id),
                result->verdict.c_str(), result->matches, result->runs, fp.c_str(), record.entry.kind.c_str());
    for (const auto& [what, n] : result->others) std::printf("  other outcome: %s x%zu\n", what.c_str(), n);
  }
  return result->matches > 0 ? kExitOk : kExitFailures;
}

}  // namespace pillbox::cli
