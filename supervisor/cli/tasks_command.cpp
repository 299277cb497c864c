// pillbox tasks: every task of the store's ledger, with its attempts, how
// the last one ended and when it runs again (store/task_view.h). A table, or
// one JSON object per task with --json.
#include <cinttypes>
#include <cstdio>
#include <map>
#include <nlohmann/json.hpp>
#include <string>

#include "supervisor/cli/args.h"
#include "supervisor/cli/commands.h"
#include "supervisor/cli/exit_code.h"
#include "supervisor/cli/store_access.h"
#include "supervisor/io/terminal_text.h"
#include "supervisor/ops/filter_text.h"
#include "supervisor/ops/task_json.h"
#include "supervisor/store/process_claim.h"
#include "supervisor/store/quarantine_store.h"
#include "supervisor/store/task_view.h"

namespace pillbox::cli {
namespace {

const char* kHelp =
    "usage: pillbox tasks [--store DIR] [--state S] [--key K] [--handler H] [--limit N] [--json]\n"
    "       pillbox tasks --release-claims HOST [--store DIR]\n"
    "       pillbox tasks --forget --state held|pending|retrying|gave-up [--key K] [--handler H] [--store DIR]\n"
    "\n"
    "Every task the store's ledger has, in key order: its state, attempts, how its last attempt\n"
    "ended, and when it is retried. States:\n"
    "  pending      never attempted, running now, or cut short (runs in the next run)\n"
    "  retrying     failed; a retry was scheduled (NEXT RETRY); the next run retries it if this one ended\n"
    "  held         its last failure was held uncharged by a suspected handler outage\n"
    "  gave-up      out of attempts for reasons that were not the payload's (a later run tries afresh)\n"
    "  ok           done (RECORD: the quarantine record whose replay resolved it, when one did; its\n"
    "               result is the replay's output, or its patch's: pillbox results KEY)\n"
    "  quarantined  poison: RECORD is its quarantine record (pillbox quarantine show ID)\n"
    "\n"
    "options:\n"
    "  --store DIR   the store (default: $PILLBOX_STORE, else $XDG_STATE_HOME/pillbox, else\n"
    "                ~/.local/state/pillbox)\n"
    "  --state S     only tasks in state S (one of the above)\n"
    "  --key K       only tasks with key K\n"
    "  --handler H   only tasks run under handler H (echo, regex, exec, plugin:NAME)\n"
    "  --limit N     at most N tasks\n"
    "  --json        one JSON object per task\n"
    "  --release-claims HOST  forget the claims of runs on HOST (another host name: a container's former\n"
    "                name, a retired machine), whose tasks other runs skip as running elsewhere (exit 5)\n"
    "                because a process of another host cannot be checked from here. Claims of this\n"
    "                host are judged by their process: those of a gone run are taken over on their own\n"
    "  --forget      remove the tasks --state (held, pending, retrying or gave-up; --key, --handler)\n"
    "                select, with their attempts: a run over the same inputs sees them as new. Never\n"
    "                one a run claims now or a quarantine record names\n"
    "\n"
    "exit codes: 0 done, 2 usage error, 3 the store cannot be used\n";

int tasks_error(const std::string& message, int exit_code) { return command_error("tasks", message, exit_code); }

// "in 12s", "in 3m", "in 2h"; "due" once the time has passed.
std::string relative(std::int64_t at_ms, std::int64_t now_ms) {
  if (at_ms == 0) return "-";
  const std::int64_t s = (at_ms - now_ms + 999) / 1000;
  if (s <= 0) return "due";
  if (s < 120) return "in " + std::to_string(s) + "s";
  if (s < 2 * 3600) return "in " + std::to_string(s / 60) + "m";
  return "in " + std::to_string(s / 3600) + "h";
}

std::string table_line(const store::TaskRow& r, std::int64_t now_ms) {
  char line[1024];
  // A quarantined task's record; an ok task's when a replay of it made the result.
  std::string record = "-";
  if (r.view == store::TaskView::kQuarantined && r.record_id != 0) record = std::to_string(r.record_id);
  if (r.view == store::TaskView::kOk && r.result_origin.from_replay()) {
    record = std::to_string(r.result_origin.record_id) +
             (r.result_origin.revision > 0 ? " (patch " + std::to_string(r.result_origin.revision) + ")" : " (replay)");
  }
  const std::string next = r.view == store::TaskView::kRetrying ? relative(r.next_retry_at, now_ms) : "-";
  std::snprintf(line, sizeof line, "%-40s %-11s %8" PRId64 " %-17s %-21s %-10s %s\n", table_cell(r.key, 40).c_str(),
                std::string(to_string(r.view)).c_str(), r.attempts,
                table_cell(r.last_kind.empty() ? "-" : r.last_kind, 17).c_str(),
                table_cell(r.last_fingerprint.empty() ? "-" : r.last_fingerprint, 21).c_str(), next.c_str(),
                record.c_str());
  return line;
}

}  // namespace

int tasks_command(int argc, char** argv) {
  const std::vector<OptionSpec> specs = {{"store"}, {"state"}, {"key"}, {"handler"}, {"limit"}, {"json", false},
                                         {"release-claims"}, {"forget", false}, {"help", false}};
  int exit_code = kExitOk;
  auto args = parse_command(argc, argv, 2, specs, "tasks", kHelp, exit_code);
  if (!args) return exit_code;
  if (!args->positional().empty()) return tasks_error("unexpected argument '" + args->positional()[0] + "'", kExitUsage);
  if (args->has_dashdash()) return tasks_error("unexpected '--'", kExitUsage);
  if (auto host = args->value("release-claims")) {
    const std::string& mine = store::process_claim_token();
    if (host->empty() || host->find(':') != std::string::npos) {
      return tasks_error("--release-claims takes a host name, as the claim's first field shows (pillbox tasks --json: "
                         "claimed_by)", kExitUsage);
    }
    if (mine.compare(0, host->size() + 1, *host + ":") == 0) {
      return tasks_error("'" + table_cell(*host, 200) + "' is this host: its claims are judged by their process (a "
                         "gone run's are taken over by the next run; a live run's are its own)", kExitUsage);
    }
    auto access = open_existing_store(*args);
    if (!access) return tasks_error(access.error(), exit_code_for(access.error_code()));
    auto released = store::release_claims_of_host((*access)->store.db(), *host);
    if (!released) return tasks_error(released.error(), kExitSetup);
    std::fprintf(stderr, "pillbox tasks: released %" PRId64 " claim%s of host '%s'\n", *released,
                 *released == 1 ? "" : "s", table_cell(*host, 200).c_str());
    return kExitOk;
  }
  store::TaskFilter filter;
  if (auto s = args->value("state")) {
    auto view = task_state_filter(*s);
    if (!view) return tasks_error(view.error(), kExitUsage);
    filter.view = *view;
  }
  filter.key = args->value("key");
  filter.handler = args->value("handler");
  if (auto s = read_whole_number(*args, "limit", 1, 1L << 40, filter.limit); !s) return tasks_error(s.message(), kExitUsage);

  if (args->flag("forget")) {
    // Only what no run finished: ok tasks hold results, quarantined ones
    // records; those have verbs of their own.
    if (!filter.view || *filter.view == store::TaskView::kOk || *filter.view == store::TaskView::kQuarantined) {
      return tasks_error("--forget needs --state held, pending, retrying or gave-up (ok tasks and quarantined ones "
                         "are kept: pillbox quarantine discard forgets a record)",
                         kExitUsage);
    }
    auto access = open_existing_store(*args);
    if (!access) return tasks_error(access.error(), exit_code_for(access.error_code()));
    auto forgotten = store::forget_tasks((*access)->store.db(), filter);
    if (!forgotten) return tasks_error(forgotten.error(), kExitSetup);
    std::fprintf(stderr, "pillbox tasks: forgot %" PRId64 " %s task%s%s\n", forgotten->removed,
                 std::string(to_string(*filter.view)).c_str(), forgotten->removed == 1 ? "" : "s",
                 forgotten->kept == 0 ? ""
                                      : ("; kept " + std::to_string(forgotten->kept) +
                                         " that a run claims now or a quarantine record names")
                                            .c_str());
    return kExitOk;
  }
  auto access = open_existing_store(*args);
  if (!access) return tasks_error(access.error(), exit_code_for(access.error_code()));

  const bool json = args->flag("json");
  const std::int64_t now = store::now_ms();
  std::map<store::TaskView, std::int64_t> counts;
  std::int64_t shown = 0;
  if (!json) {
    std::printf("%-40s %-11s %8s %-17s %-21s %-10s %s\n", "KEY", "STATE", "ATTEMPTS", "LAST KIND", "FINGERPRINT",
                "NEXT RETRY", "RECORD");
  }
  auto s = store::each_task((*access)->store.db(), filter, [&](const store::TaskRow& r) {
    ++shown;
    ++counts[r.view];
    const std::string line =
        json ? task_json(r, now).dump(-1, ' ', false, nlohmann::json::error_handler_t::replace) + "\n" : table_line(r, now);
    std::fwrite(line.data(), 1, line.size(), stdout);
    return true;
  });
  std::fflush(stdout);
  if (!s) return tasks_error(s.message(), kExitSetup);
  std::string summary = std::to_string(shown) + " task" + (shown == 1 ? "" : "s");
  std::string parts;
  for (store::TaskView v : store::kAllTaskViews) {
    if (counts[v] == 0) continue;
    parts += (parts.empty() ? ": " : ", ") + std::to_string(counts[v]) + " " + std::string(to_string(v));
  }
  std::fprintf(stderr, "%s%s\n", summary.c_str(), parts.c_str());
  return kExitOk;
}

}  // namespace pillbox::cli
