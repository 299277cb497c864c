// pillbox run [options] INPUT... [-- CMD ARGS...]
#include <signal.h>
#include <unistd.h>

#include <chrono>
#include <memory>
#include <nlohmann/json.hpp>
#include <cstdio>
#include <optional>
#include <string>

#include "supervisor/cli/args.h"
#include "supervisor/cli/child_options.h"
#include "supervisor/cli/commands.h"
#include "supervisor/cli/exit_code.h"
#include "supervisor/cli/path_options.h"
#include "supervisor/cli/progress.h"
#include "supervisor/cli/run_job.h"
#include "supervisor/cli/run_options.h"
#include "supervisor/cli/run_output.h"
#include "supervisor/exec/dispatcher.h"
#include "supervisor/flow/input_total.h"
#include "supervisor/io/result_files.h"
#include "supervisor/io/terminal_text.h"
#include "supervisor/store/store.h"

namespace pillbox::cli {
namespace {

const char* kHelp =
    "usage: pillbox run [options] INPUT...\n"
    "       pillbox run [options] INPUT... -- CMD ARGS...   (exec mode: any program)\n"
    "\n"
    "Runs every input in its own confined child process and reports how each one ended.\n"
    "INPUT is a regular file, a directory (read recursively), or - for JSON lines on stdin:\n"
    "  {\"key\": \"id-1\", \"payload\": \"text\"}   or   {\"key\": \"id-2\", \"payload_b64\": \"...\"}\n"
    "Anything else named here (a FIFO, a device) is refused before anything runs. In a directory,\n"
    "symlinks are not followed and entries that are not regular files are skipped, each listed\n"
    "on stderr as an input error (exit code 2).\n"
    "\n"
    "exec mode: CMD gets the payload on stdin, or as a file where ARGS name it (stdin is then empty):\n"
    "  {}      the payload's file, under the input's own name: /tmp/pillbox-input/contacts-011.csv\n"
    "          for the input exports/contacts-011.csv (in the task's private /tmp)\n"
    "  {.}     the same without its extension     {/}  contacts-011.csv     {/.}  contacts-011\n"
    "  {key}   the task's key (exports/contacts-011.csv); also in $PILLBOX_KEY, in every exec task\n"
    "  Expanded inside an argument too (--in={}). In the file's name, bytes a shell acts on are _,\n"
    "  so {} stays one word in sh -c '...'; {key} is as given: there, use \"$PILLBOX_KEY\".\n"
    "\n"
    "options:\n"
    "  --handler NAME      echo | regex | pdf-text | inflate | plugin:PATH.so (not with a command)\n"
    "  --arg K=V           handler argument, repeatable (regex: pattern=, mode=search|match, icase=yes|no)\n"
    "  --policy NAME|FILE  confinement policy (default: strict for handlers, exec for commands)\n"
    "  --jobs N            children running at once (default: number of cores)\n"
    "  --timeout DURATION  wall-clock limit per task, e.g. 500ms, 10s (overrides the policy);\n"
    "                      every DURATION here is a number (decimals allowed: 0.5s, 1.5m) with a\n"
    "                      unit: ms, s, m, h or d; a bare number is seconds\n"
    "  --cpu DURATION      CPU-time limit per task (overrides the policy)\n"
    "  --memory SIZE       memory limit per task, e.g. 256M (overrides the policy)\n"
    "  --max-output SIZE   largest result accepted (overrides the policy)\n"
    "  --json              one JSON object per task on stdout\n"
    "  --out DIR           write each successful result to DIR/NAME.out, NAME the key with bytes\n"
    "                      other than A-Z a-z 0-9 . - _ as %XX (a/b -> a%2Fb.out); see README.md\n"
    "  --out-mode MODE     permissions of those files, octal (default 0600: only the owner reads them)\n"
    "  --follow-symlinks   in directories, read what symlinks point to (regular files only; anywhere)\n"
    "  --writable DIR      a host directory tasks may write (absolute; repeatable; part of the policy)\n"
    "  --share DIR         a host directory tasks may read where they would see their own instead:\n"
    "                      under /tmp, /var/tmp, /dev/shm (absolute; repeatable; part of the policy)\n"
    "  --mode MODE         zygote (default: fork per task from a prepared process) | spawn (fork+exec per task)\n"
    "  --quiet             no per-task lines without --json, no summary\n"
    "  --failures-only     without --json: a line for each task that did not end ok (and each input\n"
    "                      error) only; the progress bar and the summary as usual\n"
    "  --metrics ADDR      serve Prometheus metrics at http://ADDR/metrics while the run lasts:\n"
    "                      HOST:PORT, or PORT alone on 127.0.0.1; port 0 picks a free one; the URL\n"
    "                      is printed on stderr; with a store, what it holds is included\n"
    "\n"
    "store, retries and quarantine:\n"
    "  --store DIR         ledger and quarantine store (default: $PILLBOX_STORE, else\n"
    "                      $XDG_STATE_HOME/pillbox, else ~/.local/state/pillbox); a run over the\n"
    "                      same inputs and store resumes: tasks already ok or quarantined are skipped\n"
    "  --no-store          keep nothing: no resume, poison payloads reported but not quarantined\n"
    "  --rerun             run tasks the store already has as ok again\n"
    "  --rerun-outdated    ... only those ok under another version of the scripts the command names\n"
    "                      (their content is the version: an edit makes a new one; the summary counts them)\n"
    "  --keep-results SIZE keep the results of ok tasks in the store, at most SIZE in all, the oldest\n"
    "                      evicted first (default 256M; 0: keep none); `pillbox results` reads them,\n"
    "                      and with --out the results of tasks skipped as done are written too\n"
    "  --max-attempts N    attempts per task before it is quarantined (default 3); a deterministic\n"
    "                      failure (crash, cpu-limit, ...) with the same fingerprint twice in a row\n"
    "                      is quarantined at once\n"
    "  --backoff-base D    first retry delay ceiling (default 1s); doubles per failure, full jitter\n"
    "  --backoff-max D     retry delay ceiling (default 60s)\n"
    "  --retry-exit-code N exec mode: exit code meaning \"transient, retry\" (repeatable); never quarantined\n"
    "  --breaker-window N  outage detection: distinct payloads considered (default 20)\n"
    "  --breaker-threshold F  fraction of them failing, mostly one way, that pauses intake (default 0.8)\n"
    "  --breaker-probe-interval D  while paused, one probe task this often (default 1s); a payload that\n"
    "                      succeeded earlier in the run is the probe when there is one (a burst of\n"
    "                      poison then resumes at once)\n"
    "  --breaker-max-wait D  paused longer than this: stop, exit 4, held tasks run next time\n"
    "                      (default 5m; 0: no limit)\n"
    "  --no-breaker        never suspect an outage (e.g. for a corpus of known crashers)\n"
    "  --quarantine-limit N  records kept before repeats of known fingerprints are folded (default 100000)\n"
    "  --on-quarantine CMD run CMD (sh -c) for each new quarantine record, the record as JSON on stdin\n"
    "  --on-new-fingerprint CMD  the same, only for fingerprints the store has never seen\n"
    "  --hook-timeout D    hooks running longer are killed (default 10s); hooks never block the run\n"
    "\n"
    "exit codes: 0 all tasks ok, 1 some tasks failed, 2 usage or input error, 3 setup error,\n"
    "            4 stopped by a suspected handler outage (held tasks run again next time),\n"
    "            5 the rest ok, but some tasks were skipped as running elsewhere: another live pillbox\n"
    "              process on the same store was running them, and their verdicts are its own\n"
    "            130/143 stopped by SIGINT/SIGTERM (tasks in flight run again next time)\n";

// Besides the sections' own (child, store, retry, breaker, quarantine, --out).
const std::vector<OptionSpec> kRunOptions = {
    {"jobs"}, {"json", false}, {"follow-symlinks", false}, {"quiet", false}, {"failures-only", false}, {"help", false}};

std::vector<OptionSpec> run_option_specs() {
  std::vector<OptionSpec> options;
  for (const auto* section : {&kChildOptions, &kRunOptions, &kStoreOptions, &kRetryOptions, &kBreakerOptions,
                              &kQuarantineOptions, &kOutOptions, &kMetricsOptions}) {
    options.insert(options.end(), section->begin(), section->end());
  }
  return options;
}

int usage_error(const std::string& message) { return command_error("run", message, kExitUsage); }

// The --out file of a key an earlier JSON line gave another payload carries
// this payload's hash: both results are kept, under names every run agrees on.
std::string_view variant_of(const Task& task) {
  return task.key_reused ? result_variant(task.payload_sha256) : std::string_view{};
}

class CliSink final : public VerdictSink {
 public:
  // `results`: where successful results go (--out), or null: into the JSON.
  CliSink(bool json, bool quiet, bool failures_only, ResultFiles* results)
      : json_(json), quiet_(quiet), failures_only_(failures_only), results_(results) {}

  void on_verdict(const Task& task, const Outcome& outcome, const Verdict& verdict) override {
    if (verdict.type != Verdict::Type::kHeld) summary_.add(task, outcome);
    std::string file;
    if (results_ != nullptr && outcome.kind == Kind::kOk) {
      file = write_result_file(*results_, task.key, outcome.output, "run", write_errors_, variant_of(task));
    }
    hide_progress();
    if (json_) {
      print_json_line(outcome_json(task, outcome, file.empty() ? nullptr : &file, &verdict));
    } else if (!quiet_ && !(failures_only_ && verdict.type == Verdict::Type::kOk)) {
      std::printf("%s\n", outcome_line(task, outcome, &verdict).c_str());
      std::fflush(stdout);
    }
    if (progress_ != nullptr) {
      if (verdict.type == Verdict::Type::kHeld) progress_->count("held");
      else if (outcome.kind != Kind::kOk) progress_->count(std::string(to_string(outcome.kind)));
      advance(1);
    }
  }

  // Messages may name entries of an input tree someone else filled: shown
  // safe for a terminal.
  void on_input_error(const std::string& message) override {
    hide_progress();
    std::fprintf(stderr, "pillbox run: %s\n", table_cell(message, 4000).c_str());
    if (progress_ != nullptr) {
      progress_->count("input error");
      advance(1);
    }
  }

  void on_skipped(const Task& task, const std::string& why, std::int64_t) override {
    if (json_) {  // without --json the summary counts them; a line per skipped task would bury the news
      hide_progress();
      nlohmann::json j{{"key", task.key}, {"verdict", "skipped"}, {"verdict_reason", why}};
      print_json_line(j.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace));
    }
    if (progress_ != nullptr) {
      progress_->count("skipped");
      advance(1);
    }
  }

  // A task done in an earlier run, with --out: its kept result is written
  // like a new one; one without a kept result is counted in the summary.
  void on_done_result(const Task& task, const std::string* output, const std::string& /*why_not*/) override {
    if (results_ != nullptr && output != nullptr) {
      (void)write_result_file(*results_, task.key, *output, "run", write_errors_, variant_of(task));
    }
  }

  void on_notice(const std::string& message) override {
    hide_progress();
    std::fprintf(stderr, "pillbox run: %s\n", message.c_str());
    std::fflush(stderr);
    if (progress_ != nullptr) progress_->show();
  }

  const RunSummary& summary() const { return summary_; }
  void on_taken_back(const Task& task, const Outcome& outcome, const std::string& why,
                     std::int64_t record_id) override {
    summary_.remove(outcome);
    hide_progress();
    if (json_) {
      nlohmann::json j{{"key", task.key}, {"verdict", "taken-back"}, {"verdict_reason", why}};
      if (record_id != 0) j["quarantine_id"] = record_id;
      print_json_line(j.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace));
    } else if (!quiet_) {
      std::printf("taken back        %s  -> held: %s\n", table_cell(task.key, 200).c_str(), why.c_str());
      std::fflush(stdout);
    }
    // Its verdict no longer stands: it counts again when it gets its next one.
    if (progress_ != nullptr) {
      progress_->count(std::string(to_string(outcome.kind)), -1);
      advance(-1);
    }
  }

  void on_status(const std::string& status) override {
    status_ = status;
    if (progress_ != nullptr) progress_->update(done_, status_);
  }

  // Only a progress line that is drawn: without one, nothing is counted for it.
  void set_progress(Progress* progress) { progress_ = progress->active() ? progress : nullptr; }
  bool write_errors() const { return write_errors_; }

 private:
  // The line on stderr is erased before anything else is printed (on the
  // same terminal it would be left mid-line) and drawn again after.
  void hide_progress() {
    if (progress_ != nullptr) progress_->hide();
  }
  // One more input finished (a verdict, skipped, unreadable), or one fewer
  // (its verdict taken back: it is held and finishes again later).
  void advance(int delta) {
    if (delta > 0) ++done_;
    else if (done_ > 0) --done_;
    progress_->update(done_, status_);
    progress_->show();
  }

  bool json_;
  bool quiet_;
  bool failures_only_;  // --failures-only: no line for a task that ended ok
  ResultFiles* results_;  // not owned; outlives the sink
  RunSummary summary_;
  bool write_errors_ = false;
  Progress* progress_ = nullptr;
  std::size_t done_ = 0;
  std::string status_;  // "paused: ..." while the breaker is open
};

Expected<std::unique_ptr<TaskSource>> read_inputs(const Args& args) {
  if (args.positional().empty()) return Error{"no inputs (give files, directories, or - for JSON lines on stdin)"};
  return open_inputs(args.positional(), STDIN_FILENO, read_symlinks_in_tree(args));
}

// Durability, retries, outage detection and what a quarantine sets off.
Status read_job_options(const Args& args, JobSettings& job, QuarantineHooks& hooks) {
  if (auto s = read_store_options(args, job); !s) return s;
  if (auto s = read_retry_options(args, job); !s) return s;
  if (auto s = read_breaker_options(args, job.breaker); !s) return s;
  return read_quarantine_options(args, job, hooks);
}

// The summary on stderr, and the exit code.
int report_run(const Args& args, Expected<JobReport>& report, const CliSink& sink, double seconds,
               const std::vector<std::string>& hook_problems) {
  if (!report) return work_error("run", report.error(), report.error_code());
  for (const auto& p : hook_problems) report->run.warnings.push_back(p);
  if (!args.flag("quiet")) {
    std::fputs(sink.summary().render(seconds, report->run, &report->flow, report->store_dir).c_str(), stderr);
  }
  if (report->stop_signal != 0) {
    std::fprintf(stderr, "pillbox run: stopped by %s; %zu attempts in flight recorded as interrupted%s\n",
                 report->stop_signal == SIGINT ? "SIGINT" : "SIGTERM", report->flow.interrupted,
                 report->store_dir.empty() ? "" : " (a run over the same inputs and store finishes the rest)");
    return 128 + report->stop_signal;
  }
  if (report->run.input_errors > 0 || report->flow.input_errors > 0 || sink.write_errors()) return kExitUsage;
  if (!report->flow.stopped_for_setup.empty()) return kExitSetup;
  if (report->flow.held > 0) return kExitOutage;
  if (sink.summary().failed() > 0) return kExitFailures;
  return report->flow.running_elsewhere > 0 ? kExitElsewhere : kExitOk;
}

}  // namespace

int run_command(int argc, char** argv) {
  int exit_code = kExitOk;
  auto args = parse_command(argc, argv, 2, run_option_specs(), "run", kHelp, exit_code);
  if (!args) return exit_code;
  JobSettings job;
  auto run = read_run_settings(*args);
  if (!run) return usage_error(run.error());
  job.run = std::move(*run);
  auto out = read_result_files(*args);
  if (!out) return usage_error(out.error());
  std::optional<ResultFiles> results = std::move(*out);
  QuarantineHooks hooks;
  if (auto s = read_job_options(*args, job, hooks); !s) return usage_error(s.message());
  // Listed only once the store is known: its files are never inputs.
  if (job.store_dir) store::keep_store_out_of_inputs(*job.store_dir);
  auto source = read_inputs(*args);
  if (!source) return usage_error(source.error());
  job.on_quarantine = [&hooks](const std::string& json, bool new_fingerprint) { hooks.fire(json, new_fingerprint); };
  job.done_results = results.has_value();
  // Listening before anything runs: a port in use stops the run here.
  auto endpoint = start_metrics(*args, job.store_dir, "run", job.run.jobs, job.metrics);
  if (!endpoint) return usage_error(endpoint.error());

  if (args->flag("failures-only") && (args->flag("json") || args->flag("quiet"))) {
    return usage_error(std::string("--failures-only chooses which task lines are printed; --") +
                       (args->flag("json") ? "json prints every task as JSON (filter on \"kind\" instead)"
                                           : "quiet prints none"));
  }
  CliSink sink(args->flag("json"), args->flag("quiet"), args->flag("failures-only"), results ? &*results : nullptr);
  // Inputs named as files and directories are listed before the run, so
  // their count is the total; JSON lines on stdin have none.
  Progress progress = Progress::on_stderr("run", known_total(**source).value_or(0), args->flag("quiet"));
  sink.set_progress(&progress);
  const auto started = std::chrono::steady_clock::now();
  auto report = run_job(job, **source, sink);
  endpoint->reset();  // the metrics are the run's: served while it runs, not while hooks finish
  progress.finish();
  const std::vector<std::string> hook_problems = hooks.finish();
  const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - started).count();
  return report_run(*args, report, sink, seconds, hook_problems);
}

}  // namespace pillbox::cli
