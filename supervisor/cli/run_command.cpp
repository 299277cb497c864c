// pillbox run [options] INPUT... [-- CMD ARGS...]
#include <pwd.h>
#include <signal.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <memory>
#include <nlohmann/json.hpp>
#include <cstdio>
#include <optional>
#include <string>
#include <thread>

#include "shared/policy_parser.h"
#include "supervisor/cli/args.h"
#include "supervisor/cli/child_options.h"
#include "supervisor/cli/commands.h"
#include "supervisor/cli/exit_code.h"
#include "supervisor/cli/path_options.h"
#include "supervisor/exec/install_paths.h"
#include "supervisor/flow/alert_hook.h"
#include "supervisor/exec/child_setup.h"
#include "supervisor/flow/progress.h"
#include "supervisor/flow/job.h"
#include "supervisor/exec/dispatcher.h"
#include "supervisor/store/store_dir.h"
#include "supervisor/io/result_files.h"
#include "supervisor/flow/run_output.h"
#include "supervisor/io/terminal_text.h"

namespace pillbox::cli {
namespace {

const char* kHelp =
    "usage: pillbox run [options] INPUT...\n"
    "       pillbox run [options] INPUT... -- CMD ARGS...   (exec mode: payload on stdin, or as a file where {} appears)\n"
    "\n"
    "Runs every input in its own confined child process and reports how each one ended.\n"
    "INPUT is a regular file, a directory (read recursively), or - for JSON lines on stdin:\n"
    "  {\"key\": \"id-1\", \"payload\": \"text\"}   or   {\"key\": \"id-2\", \"payload_b64\": \"...\"}\n"
    "Anything else named here (a FIFO, a device) is refused before anything runs. In a directory,\n"
    "symlinks are not followed and entries that are not regular files are skipped, each listed\n"
    "on stderr as an input error (exit code 2).\n"
    "\n"
    "options:\n"
    "  --handler NAME      echo | regex | pdf-text | inflate | plugin:PATH.so (not with a command)\n"
    "  --arg K=V           handler argument, repeatable (regex: pattern=, mode=search|match, icase=yes|no)\n"
    "  --policy NAME|FILE  confinement policy (default: strict for handlers, exec for commands)\n"
    "  --jobs N            children running at once (default: number of cores)\n"
    "  --timeout DURATION  wall-clock limit per task, e.g. 500ms, 10s (overrides the policy)\n"
    "  --cpu DURATION      CPU-time limit per task (overrides the policy)\n"
    "  --memory SIZE       memory limit per task, e.g. 256M (overrides the policy)\n"
    "  --max-output SIZE   largest result accepted (overrides the policy)\n"
    "  --json              one JSON object per task on stdout\n"
    "  --out DIR           write each successful result to DIR/NAME.out, NAME the key with bytes\n"
    "                      other than A-Z a-z 0-9 . - _ as %XX (a/b -> a%2Fb.out); see README.md\n"
    "  --out-mode MODE     permissions of those files, octal (default 0600: only the owner reads them)\n"
    "  --follow-symlinks   in directories, read what symlinks point to (regular files only; anywhere)\n"
    "  --mode MODE         zygote (default: fork per task from a prepared process) | spawn (fork+exec per task)\n"
    "  --quiet             no per-task lines without --json, no summary\n"
    "\n"
    "store, retries and quarantine:\n"
    "  --store DIR         ledger and quarantine store (default: $PILLBOX_STORE, else\n"
    "                      $XDG_STATE_HOME/pillbox, else ~/.local/state/pillbox); a run over the\n"
    "                      same inputs and store resumes: tasks already ok or quarantined are skipped\n"
    "  --no-store          keep nothing: no resume, poison payloads reported but not quarantined\n"
    "  --rerun             run tasks the store already has as ok again\n"
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
    "            130/143 stopped by SIGINT/SIGTERM (tasks in flight run again next time)\n";

const std::vector<OptionSpec> kRunOptions = {
    {"jobs"}, {"json", false}, {"follow-symlinks", false}, {"quiet", false}, {"help", false},
    {"store"}, {"no-store", false}, {"rerun", false}, {"max-attempts"}, {"backoff-base"}, {"backoff-max"},
    {"retry-exit-code", true, true}, {"breaker-window"}, {"breaker-threshold"}, {"breaker-probe-interval"}, {"breaker-max-wait"},
    {"no-breaker", false}, {"quarantine-limit"}, {"hook-timeout"},
    // Hook commands may carry tokens: kept out of /proc/PID/cmdline (OptionSpec::secret).
    {"on-quarantine", true, false, 0, true}, {"on-new-fingerprint", true, false, 0, true},
};

Expected<std::chrono::milliseconds> parse_delay(const Args& args, const std::string& name, std::chrono::milliseconds fallback,
                                                std::uint64_t min_ms, std::uint64_t max_ms) {
  auto v = args.value(name);
  if (!v) return fallback;
  auto ms = parse_duration_ms(*v, "--" + name, min_ms, max_ms);
  if (!ms) return Error{ms.error()};
  return std::chrono::milliseconds(static_cast<std::int64_t>(*ms));
}

int usage_error(const std::string& message) {
  std::fprintf(stderr, "pillbox run: %s\n", message.c_str());
  return kExitUsage;
}

class CliSink final : public VerdictSink {
 public:
  // `results`: where successful results go (--out), or null: into the JSON.
  CliSink(bool json, bool quiet, ResultFiles* results) : json_(json), quiet_(quiet), results_(results) {}

  void on_verdict(const Task& task, const Outcome& outcome, const Verdict& verdict) override {
    if (verdict.type != Verdict::Type::kHeld) summary_.add(task, outcome);
    if (progress_ != nullptr) progress_->update(++verdicts_, status_);
    std::string file;
    if (results_ != nullptr && outcome.kind == Kind::kOk) {
      auto written = results_->write(task.key, outcome.output);
      if (written) {
        file = std::move(*written);
      } else {
        std::fprintf(stderr, "pillbox run: %s\n", table_cell(written.error(), 2000).c_str());
        write_errors_ = true;
      }
    }
    if (json_) {
      const std::string line = outcome_json(task, outcome, file.empty() ? nullptr : &file, &verdict);
      std::fwrite(line.data(), 1, line.size(), stdout);
      std::fputc('\n', stdout);
      std::fflush(stdout);
    } else if (!quiet_) {
      std::printf("%s\n", outcome_line(task, outcome, &verdict).c_str());
      std::fflush(stdout);
    }
  }

  // Messages may name entries of an input tree someone else filled: shown
  // safe for a terminal.
  void on_input_error(const std::string& message) override {
    std::fprintf(stderr, "pillbox run: %s\n", table_cell(message, 4000).c_str());
  }

  void on_skipped(const Task& task, const std::string& why, std::int64_t) override {
    if (!json_) return;  // the summary counts them; a line per skipped task would bury the news
    nlohmann::json j{{"key", task.key}, {"verdict", "skipped"}, {"verdict_reason", why}};
    const std::string line = j.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
    std::fwrite(line.data(), 1, line.size(), stdout);
    std::fputc('\n', stdout);
    std::fflush(stdout);
  }

  void on_notice(const std::string& message) override {
    std::fprintf(stderr, "pillbox run: %s\n", message.c_str());
    std::fflush(stderr);
  }

  const RunSummary& summary() const { return summary_; }
  void on_taken_back(const Task& task, const Outcome& outcome, const std::string& why,
                     std::int64_t record_id) override {
    summary_.remove(outcome);
    if (json_) {
      nlohmann::json j{{"key", task.key}, {"verdict", "taken-back"}, {"verdict_reason", why}};
      if (record_id != 0) j["quarantine_id"] = record_id;
      const std::string line = j.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
      std::fwrite(line.data(), 1, line.size(), stdout);
      std::fputc('\n', stdout);
      std::fflush(stdout);
    } else if (!quiet_) {
      std::printf("taken back        %s  -> held: %s\n", table_cell(task.key, 200).c_str(), why.c_str());
      std::fflush(stdout);
    }
  }

  void on_status(const std::string& status) override {
    status_ = status;
    if (progress_ != nullptr) progress_->update(verdicts_, status_);
  }

  void set_progress(Progress* progress) { progress_ = progress; }
  bool write_errors() const { return write_errors_; }

 private:
  bool json_;
  bool quiet_;
  ResultFiles* results_;  // not owned; outlives the sink
  RunSummary summary_;
  bool write_errors_ = false;
  Progress* progress_ = nullptr;
  std::size_t verdicts_ = 0;
  std::string status_;  // "paused: ..." while the breaker is open
};

}  // namespace

int run_command(int argc, char** argv) {
  std::vector<OptionSpec> options = kChildOptions;
  options.insert(options.end(), kRunOptions.begin(), kRunOptions.end());
  options.insert(options.end(), kOutOptions.begin(), kOutOptions.end());
  auto args = Args::parse(argc, argv, 2, options, "run");
  if (!args) return usage_error(args.error());
  if (args->flag("help")) {
    std::fputs(kHelp, stdout);
    return kExitOk;
  }
  RunSettings settings;

  // What runs (a handler, or a command after "--"), under which policy,
  // with the command line's overrides.
  auto config = read_child_config(*args);
  if (!config) return usage_error(config.error());
  settings.config = std::move(*config);

  // How.
  auto jobs = read_jobs(*args);
  if (!jobs) return usage_error(jobs.error());
  settings.jobs = *jobs;
  auto mode = read_launch_mode(*args);
  if (!mode) return usage_error(mode.error());
  settings.mode = *mode;
  settings.sandbox_binary = find_sandbox_binary();

  auto out = read_result_files(*args);
  if (!out) return usage_error(out.error());
  std::optional<ResultFiles> results = std::move(*out);

  // What from.
  if (args->positional().empty()) return usage_error("no inputs (give files, directories, or - for JSON lines on stdin)");
  auto source = open_inputs(args->positional(), STDIN_FILENO, read_symlinks_in_tree(*args));
  if (!source) return usage_error(source.error());

  // Durability, retries, outage detection.
  JobSettings job;
  job.run = std::move(settings);
  if (args->flag("no-store")) {
    if (args->value("store")) return usage_error("give --store or --no-store, not both");
  } else {
    auto dir = store::resolve_store_dir(args->value("store").value_or(""));
    if (!dir) return usage_error(dir.error());
    job.store_dir = *dir;
  }
  job.rerun_done = args->flag("rerun");
  if (auto v = args->value("max-attempts")) {
    auto n = parse_whole_number("max-attempts", *v, 1, 100);
    if (!n) return usage_error(n.error());
    job.retry.max_attempts = static_cast<std::uint32_t>(*n);
  }
  auto base = parse_delay(*args, "backoff-base", job.retry.backoff_base, 0, 3'600'000);
  if (!base) return usage_error(base.error());
  job.retry.backoff_base = *base;
  auto cap = parse_delay(*args, "backoff-max", job.retry.backoff_max, 0, 24 * 3'600'000ull);
  if (!cap) return usage_error(cap.error());
  job.retry.backoff_max = *cap;
  for (const auto& code : args->values("retry-exit-code")) {
    if (!job.run.config.exec_mode()) return usage_error("--retry-exit-code is for exec commands (after --)");
    auto n = parse_whole_number("retry-exit-code", code, 1, 255);
    if (!n) return usage_error(n.error());
    job.retry.retry_exit_codes.insert(static_cast<int>(*n));
  }
  job.breaker.enabled = !args->flag("no-breaker");
  if (auto v = args->value("breaker-window")) {
    auto n = parse_whole_number("breaker-window", *v, 2, 100000);
    if (!n) return usage_error(n.error());
    job.breaker.window = static_cast<std::size_t>(*n);
  }
  if (auto v = args->value("breaker-threshold")) {
    char* end = nullptr;
    const double f = std::strtod(v->c_str(), &end);
    if (v->empty() || *end != '\0' || !(f > 0.0 && f <= 1.0)) {
      return usage_error("--breaker-threshold expects a fraction above 0 and at most 1, e.g. 0.8; got '" + *v + "'");
    }
    job.breaker.threshold = f;
  }
  auto probe = parse_delay(*args, "breaker-probe-interval", job.breaker.probe_interval, 10, 3'600'000);
  if (!probe) return usage_error(probe.error());
  job.breaker.probe_interval = *probe;
  auto max_wait = parse_delay(*args, "breaker-max-wait", job.breaker.max_wait, 0, 7 * 24 * 3'600'000ull);
  if (!max_wait) return usage_error(max_wait.error());
  job.breaker.max_wait = *max_wait;
  if (auto v = args->value("quarantine-limit")) {
    auto n = parse_whole_number("quarantine-limit", *v, 1, 1'000'000'000);
    if (!n) return usage_error(n.error());
    job.max_records = *n;
  }
  auto hook_timeout = parse_delay(*args, "hook-timeout", std::chrono::milliseconds(10'000), 100, 3'600'000);
  if (!hook_timeout) return usage_error(hook_timeout.error());
  std::unique_ptr<AlertHook> every_record;
  std::unique_ptr<AlertHook> new_fingerprints;
  if (auto cmd = args->value("on-quarantine")) every_record = std::make_unique<AlertHook>(HookSettings{*cmd, *hook_timeout});
  if (auto cmd = args->value("on-new-fingerprint")) {
    new_fingerprints = std::make_unique<AlertHook>(HookSettings{*cmd, *hook_timeout});
  }
  if ((every_record || new_fingerprints) && !job.store_dir) {
    return usage_error("--on-quarantine and --on-new-fingerprint need a store (not --no-store)");
  }
  job.on_quarantine = [&](const std::string& json, bool new_fingerprint) {
    if (every_record) every_record->fire(json);
    if (new_fingerprints && new_fingerprint) new_fingerprints->fire(json);
  };

  CliSink sink(args->flag("json"), args->flag("quiet"), results ? &*results : nullptr);
  // Progress on stderr: a line redrawn in place when stderr is a terminal and
  // stdout is not (on one terminal the per-task lines already show it), log
  // lines every few seconds when stderr is not a terminal; none with --quiet.
  const bool err_tty = ::isatty(STDERR_FILENO) == 1;
  const bool out_tty = ::isatty(STDOUT_FILENO) == 1;
  std::FILE* progress_out = args->flag("quiet") || (err_tty && out_tty) ? nullptr : stderr;
  Progress progress("run", 0, progress_out, err_tty);
  sink.set_progress(&progress);
  const auto started = std::chrono::steady_clock::now();
  auto report = run_job(job, **source, sink);
  progress.finish();
  // Hooks still running get a bounded time to finish; they never hold the exit longer.
  std::vector<std::string> hook_problems;
  for (auto* hook : {every_record.get(), new_fingerprints.get()}) {
    if (hook == nullptr) continue;
    hook->finish(*hook_timeout);
    for (const auto& p : hook->problems()) hook_problems.push_back(p);
    if (hook->dropped() > 0) {
      hook_problems.push_back(std::to_string(hook->dropped()) + " hook calls never ran (queue full, or the run ended first)");
    }
  }
  if (!report) {
    const std::string& message = report.error();
    const int exit_code = exit_code_for(report.error_code());
    if (exit_code == kExitUsage) return usage_error(message);
    std::fprintf(stderr, "pillbox run: setup error: %s\n", message.c_str());
    return exit_code;
  }
  const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - started).count();
  for (const auto& p : hook_problems) report->run.warnings.push_back(p);
  if (!args->flag("quiet")) {
    std::fputs(sink.summary().render(seconds, report->run, &report->flow, report->store_dir).c_str(), stderr);
  }
  if (report->stop_signal != 0) {
    std::fprintf(stderr, "pillbox run: stopped by %s; %zu attempts in flight recorded as interrupted%s\n",
                 report->stop_signal == SIGINT ? "SIGINT" : "SIGTERM", report->flow.interrupted,
                 report->store_dir.empty() ? "" : " (a run over the same inputs and store finishes the rest)");
    return 128 + report->stop_signal;
  }
  if (report->run.input_errors > 0 || report->flow.input_errors > 0 || sink.write_errors()) return kExitUsage;
  if (report->flow.held > 0) return kExitOutage;
  return sink.summary().failed() > 0 ? kExitFailures : kExitOk;
}

}  // namespace pillbox::cli
