// pillbox fuzz [SEEDS...] (--handler H [--arg K=V]... | -- CMD ARGS...)
// pillbox fuzz --from-quarantine ID | --fingerprint FP
// Thin over supervisor/fuzz/fuzz_session.h.
#include <poll.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <nlohmann/json.hpp>
#include <random>
#include <string>

#include "supervisor/cli/args.h"
#include "supervisor/cli/child_options.h"
#include "supervisor/cli/commands.h"
#include "supervisor/cli/exit_code.h"
#include "supervisor/cli/path_options.h"
#include "supervisor/cli/progress.h"
#include "supervisor/cli/quarantine_verbs.h"
#include "supervisor/cli/run_job.h"
#include "supervisor/cli/store_access.h"
#include "supervisor/exec/child_setup.h"
#include "supervisor/exec/install_paths.h"
#include "supervisor/flow/input_source.h"
#include "supervisor/fuzz/dictionary.h"
#include "supervisor/fuzz/fuzz_session.h"
#include "supervisor/io/terminal_text.h"
#include "supervisor/store/actor.h"

namespace pillbox::cli {
namespace {

const char* kHelp =
    "usage: pillbox fuzz [SEED...] (--handler NAME [--arg K=V]... | -- CMD ARGS...) [options]\n"
    "       pillbox fuzz (--from-quarantine ID | --fingerprint FP) [SEED...] [options]\n"
    "\n"
    "Mutates seeds and runs every candidate in the sandbox, classified exactly like `run`\n"
    "classifies a task: for handlers, plugins and programs that cannot be instrumented.\n"
    "Mutations are stacked bit and byte flips, interesting integers, arithmetic, block\n"
    "deletion and duplication, repeated bytes, splicing between corpus inputs, and dictionary\n"
    "tokens. An input is kept for further mutation when it shows new behaviour from outside:\n"
    "a new outcome kind or rejection message, or output size, CPU time or memory in a new\n"
    "power of two (so inputs that are ever slower are followed, towards a CPU blow-up).\n"
    "\n"
    "A failure (crash, stack-overflow, cpu-limit, wall-timeout, oom, seccomp-violation,\n"
    "output-limit, protocol-error) whose fingerprint the store does not hold becomes a\n"
    "quarantine record with source fuzz and its origin (seed, mutations since it, --seed); a known\n"
    "fingerprint only counts as a repeat of its record. Clean rejections (handler-error) are\n"
    "what a parser should do with garbage and are not recorded.\n"
    "\n"
    "seeds:\n"
    "  SEED...                files or directories (read recursively), or - for JSON lines on stdin;\n"
    "                         regular files only, as for `pillbox run`: anything else is an error\n"
    "  --follow-symlinks      in directories, read what symlinks point to (as for `pillbox run`)\n"
    "  --from-quarantine ID   the record's payload (and its minimized payload); runs under the\n"
    "                         record's handler and policy unless --handler/-- and --policy say otherwise\n"
    "  --fingerprint FP       the payloads of the records with this fingerprint (the newest 100), likewise\n"
    "  (no seeds at all: one empty input)\n"
    "\n"
    "options:\n"
    "  --handler NAME, --arg K=V, -- CMD ARGS, --policy, --timeout, --cpu, --memory, --max-output,\n"
    "  --mode                 what runs and under which limits, as for `pillbox run`\n"
    "  --dict FILE            dictionary of tokens (AFL/libFuzzer format: name=\"value\"), repeatable\n"
    "  --max-time DURATION    stop after this long (e.g. 60s, 10m; units ms, s, m, h, d)\n"
    "  --max-runs N           stop after this many runs\n"
    "                         (neither: run until SIGINT or SIGTERM)\n"
    "  --stop-on-finding      stop at the first new record (candidates in flight finish)\n"
    "  --max-new-records N    stop after N new records (default 1000: a target whose every failure\n"
    "                         gets a new fingerprint would otherwise fill the store)\n"
    "  --max-len N            longest candidate in bytes (default: 4096, or the largest seed)\n"
    "  --jobs N               candidates at once (default: number of cores)\n"
    "  --seed N               random seed of the mutations (default: random; printed, and kept in each\n"
    "                         finding's origin). The same seed gives the same mutations, but which\n"
    "                         inputs are kept depends on measured CPU time and on completion order,\n"
    "                         so two sessions can still differ\n"
    "  --json                 each finding and the summary as JSON lines on stdout\n"
    "  -q, --quiet            no progress bar on the terminal\n"
    "  --store DIR            the store (default: $PILLBOX_STORE, else $XDG_STATE_HOME/pillbox, else\n"
    "                         ~/.local/state/pillbox)\n"
    "\n"
    "exit codes: 0 no failures found, 1 failures found (new records or repeats), 2 usage error,\n"
    "3 the store or the sandbox cannot be used, 130/143 stopped by SIGINT/SIGTERM (findings kept)\n";

// --fingerprint: the newest records of it, at most this many, are seeds.
constexpr std::int64_t kMaxRecordSeeds = 100;

int fail(const std::string& message, int code) { return command_error("fuzz", message, code); }

// Every input of SEED... (files, directories, JSON lines) as a seed.
Status read_seed_inputs(const std::vector<std::string>& inputs, SymlinksInTree symlinks,
                        std::vector<fuzz::FuzzSeed>& seeds) {
  auto source = open_inputs(inputs, STDIN_FILENO, symlinks);
  if (!source) return Status::error(source.error());
  for (;;) {
    auto item = (*source)->next();
    switch (item.type) {
      case TaskSource::Item::Type::kTask:
        seeds.push_back({"input " + item.task.key, std::move(item.task.payload)});
        break;
      case TaskSource::Item::Type::kWait: {
        std::vector<pollfd> fds;
        for (int fd : (*source)->wait_fds()) fds.push_back({fd, POLLIN, 0});
        ::poll(fds.data(), fds.size(), -1);
        break;
      }
      case TaskSource::Item::Type::kError:  // may name an entry of a seed tree someone else filled
        return Status::error(table_cell(item.error, 4000));
      case TaskSource::Item::Type::kEnd:
        return Status::ok();
    }
  }
}

// The seeds and config of --from-quarantine / --fingerprint: the records'
// payloads, and what the newest of them ran under.
Status read_record_seeds(store::QuarantineStore& quarantine, const Args& args, std::vector<fuzz::FuzzSeed>& seeds,
                         std::optional<store::QuarantineEntry>& under) {
  std::vector<store::QuarantineRecord> records;
  if (auto id_text = args.value("from-quarantine")) {
    auto id = parse_record_id(*id_text);
    if (!id) return Status::error(id.error());
    auto record = find_store_record(quarantine, *id);
    if (!record) return Status::error(record.error());
    records.push_back(std::move(*record));
  }
  if (auto fp = args.value("fingerprint")) {
    store::ListFilter filter;
    filter.fingerprint = *fp;
    filter.limit = kMaxRecordSeeds;
    auto listed = quarantine.list(filter);
    if (!listed) return Status::error(listed.error());
    if (listed->empty()) return Status::error("no record has fingerprint " + *fp + " (see: pillbox quarantine stats)");
    for (auto& r : *listed) records.push_back(std::move(r));
  }
  for (const auto& r : records) {
    auto bytes = quarantine.payloads().get(r.entry.payload_sha256);
    if (!bytes) return Status::error("record " + std::to_string(r.id) + ": " + bytes.error());
    seeds.push_back({"quarantine record " + std::to_string(r.id), std::move(*bytes)});
    if (!r.minimized_sha256.empty()) {
      auto mini = quarantine.payloads().get(r.minimized_sha256);
      if (mini) seeds.push_back({"quarantine record " + std::to_string(r.id) + " (minimized)", std::move(*mini)});
    }
  }
  if (!records.empty()) under = records.front().entry;  // list() is newest first
  return Status::ok();
}

// What runs: the command line's handler and policy, or else the record's.
Expected<ChildConfig> fuzz_config(const Args& args, const std::optional<store::QuarantineEntry>& under) {
  if (!under) return read_child_config(args);
  auto given = read_handler_choice(args);
  if (!given) return Error{given.error()};
  auto allowed = read_record_allowance(args);
  if (!allowed) return Error{allowed.error()};
  auto handler = handler_or_recorded(*under, *given, *allowed);
  if (!handler) return Error{handler.error()};
  auto given_policy = read_policy_override(args);
  if (!given_policy) return Error{given_policy.error()};
  auto policy = policy_or_recorded(*under, *given_policy, *allowed);
  if (!policy) return Error{policy.error()};
  if (auto s = apply_limit_overrides(args, *policy); !s) return Error{s.message()};
  return make_child_config(*handler, std::move(*policy));
}

nlohmann::json finding_json(const fuzz::FuzzFinding& f) {
  return {{"type", "finding"}, {"record", f.record_id}, {"kind", f.kind},   {"fingerprint", f.fingerprint},
          {"message", f.message}, {"size", f.size},    {"seed", f.seed},    {"mutations", f.mutations},
          {"run", f.run},         {"folded", f.folded}};
}

const std::vector<OptionSpec> kFuzzOptions = {
    {"from-quarantine"}, {"fingerprint"}, {"dict", true, true}, {"max-time"}, {"max-runs"},
    {"max-len"},         {"jobs"},        {"seed"},             {"stop-on-finding", false},
    {"max-new-records"}, {"json", false}, {"store"},            {"follow-symlinks", false},
    {"quiet", false},     {"help", false}};

// --max-runs and --max-time: how long the session may go on.
Status read_fuzz_budget(const Args& args, fuzz::FuzzSettings& settings) {
  if (auto s = read_whole_number(args, "max-runs", 1, 1'000'000'000'000L, settings.max_runs); !s) return s;
  return read_duration(args, "max-time", 100, 365ull * 24 * 3600 * 1000, settings.max_time);
}

// --max-len (nullopt: the seeds decide), --seed (random when not given)
// and the --dict files: what the mutations make.
Status read_mutation_options(const Args& args, fuzz::FuzzSettings& settings, std::optional<std::size_t>& max_len) {
  if (auto s = read_whole_number(args, "max-len", 1, 64L << 20, max_len); !s) return s;
  if (args.value("seed")) {
    if (auto s = read_whole_number(args, "seed", 0, 0x7fffffffffffffffL, settings.rng_seed); !s) return s;
  } else {
    std::random_device random;
    settings.rng_seed = ((static_cast<std::uint64_t>(random()) << 32) ^ random()) & 0x7fffffffffffffffULL;
  }
  for (const auto& path : args.values("dict")) {
    auto tokens = fuzz::load_dictionary(path);
    if (!tokens) return Status::error(tokens.error());
    settings.dictionary.insert(settings.dictionary.end(), tokens->begin(), tokens->end());
  }
  return Status::ok();
}

// --stop-on-finding and --max-new-records: which findings end the session.
Status read_finding_limits(const Args& args, fuzz::FuzzSettings& settings) {
  settings.stop_on_finding = args.flag("stop-on-finding");
  return read_whole_number(args, "max-new-records", 1, 1'000'000, settings.max_new_records);
}

// Everything but the seeds and what runs, which need the store.
Status read_session_options(const Args& args, fuzz::FuzzSettings& settings, std::optional<std::size_t>& max_len) {
  if (auto s = read_jobs(args, settings.jobs); !s) return s;
  if (auto s = read_fuzz_budget(args, settings); !s) return s;
  if (auto s = read_mutation_options(args, settings, max_len); !s) return s;
  if (auto s = read_launch_mode(args, settings.mode); !s) return s;
  return read_finding_limits(args, settings);
}

// Progress on stderr, candidates a dead session left, and each finding on
// stdout as it is made.
void show_session(fuzz::FuzzSettings& settings, Progress& progress, bool json, const std::string& store_dir) {
  // Against --runs and --max-time, whichever ends first; failures by kind.
  progress.set_total(static_cast<std::size_t>(settings.max_runs));
  if (settings.max_time.count() > 0) progress.set_time_budget(settings.max_time);
  settings.on_progress = [&progress](const fuzz::FuzzProgress& p) {
    if (!progress.active()) return;
    if (p.by_kind != nullptr) {
      for (const auto& [kind, n] : *p.by_kind) {
        if (kind != "ok") progress.set_count(kind, static_cast<long>(n));
      }
    }
    progress.update(static_cast<std::size_t>(p.runs), "corpus " + std::to_string(p.corpus) + ", " +
                                                          std::to_string(p.findings) + " new, " +
                                                          std::to_string(p.repeats) + " repeats");
  };
  settings.on_recovered = [store_dir](std::size_t recovered, std::size_t other_identity) {
    if (recovered > 0) {
      std::fprintf(stderr,
                   "pillbox fuzz: %zu candidate%s %s running when an earlier session died; %s first, one at a time\n",
                   recovered, recovered == 1 ? "" : "s", recovered == 1 ? "was" : "were",
                   recovered == 1 ? "it runs" : "they run");
    }
    if (other_identity > 0) {
      std::fprintf(stderr,
                   "pillbox fuzz: %zu candidate%s left by a session that died under another handler or policy %s "
                   "kept in %s/fuzz-inflight; fuzz with that handler and policy to run %s\n",
                   other_identity, other_identity == 1 ? "" : "s", other_identity == 1 ? "is" : "are",
                   store_dir.c_str(), other_identity == 1 ? "it" : "them");
    }
  };
  settings.on_finding = [json, &progress](const fuzz::FuzzFinding& f) {
    progress.hide();  // the finding goes above the progress line
    if (json) {
      std::printf("%s\n", finding_json(f).dump(-1, ' ', false, nlohmann::json::error_handler_t::replace).c_str());
    } else {
      std::printf("%s record %lld: %s %s (%zu bytes, from %s, run %llu, mutations: %s)\n",
                  f.folded ? "repeat (store full)" : "new fingerprint", static_cast<long long>(f.record_id),
                  f.kind.c_str(), f.fingerprint.c_str(), f.size, f.seed.c_str(),
                  static_cast<unsigned long long>(f.run), table_cell(f.mutations, 120).c_str());
    }
    std::fflush(stdout);
    progress.show();
  };
}

// The summary (stderr, or a JSON line with --json) and the exit code.
int report_session(const fuzz::FuzzResult& result, const fuzz::FuzzSettings& settings, bool json) {
  std::uint64_t repeats = 0;
  for (const auto& [fp, n] : result.repeats) repeats += n;
  const double seconds = static_cast<double>(result.elapsed_ms) / 1000.0;
  const double rate = seconds > 0 ? static_cast<double>(result.runs) / seconds : 0.0;
  if (json) {
    nlohmann::json kinds = nlohmann::json::object();
    for (const auto& [k, n] : result.by_kind) kinds[k] = n;
    nlohmann::json repeat_counts = nlohmann::json::object();
    for (const auto& [fp, n] : result.repeats) repeat_counts[fp] = n;
    const nlohmann::json summary = {{"type", "summary"},          {"runs", result.runs},
                                    {"elapsed_ms", result.elapsed_ms}, {"runs_per_second", rate},
                                    {"corpus", result.corpus},   {"features", result.features},
                                    {"new_records", result.findings.size()}, {"repeats", repeat_counts},
                                    {"by_kind", kinds},           {"duplicates_skipped", result.duplicates_skipped},
                                    {"stopped_by", result.stopped_by}, {"seed", settings.rng_seed}};
    std::printf("%s\n", summary.dump().c_str());
  } else {
    std::string kinds;
    for (const auto& [k, n] : result.by_kind) kinds += (kinds.empty() ? "" : ", ") + k + " " + std::to_string(n);
    std::fprintf(stderr,
                 "pillbox fuzz: %llu runs in %.1f s (%.1f runs/s), corpus %zu, %zu new record%s, %llu repeat%s of "
                 "%zu known fingerprint%s; outcomes: %s; stopped by %s; --seed %llu\n",
                 static_cast<unsigned long long>(result.runs), seconds, rate, result.corpus, result.findings.size(),
                 result.findings.size() == 1 ? "" : "s", static_cast<unsigned long long>(repeats),
                 repeats == 1 ? "" : "s", result.repeats.size(), result.repeats.size() == 1 ? "" : "s",
                 kinds.c_str(), result.stopped_by.empty() ? "the end of the input space" : result.stopped_by.c_str(),
                 static_cast<unsigned long long>(settings.rng_seed));
    if (!result.findings.empty()) {
      std::fprintf(stderr, "  pillbox quarantine list --source fuzz shows them; pillbox minimize ID shrinks one\n");
    }
  }
  if (result.stop_signal != 0) return 128 + result.stop_signal;
  return result.findings.empty() && repeats == 0 ? kExitOk : kExitFailures;
}

}  // namespace

int fuzz_command(int argc, char** argv) {
  std::vector<OptionSpec> options = kChildOptions;
  options.insert(options.end(), kFuzzOptions.begin(), kFuzzOptions.end());
  int exit_code = kExitOk;
  auto args = parse_command(argc, argv, 2, options, "fuzz", kHelp, exit_code);
  if (!args) return exit_code;
  fuzz::FuzzSettings settings;
  std::optional<std::size_t> max_len;
  if (auto s = read_session_options(*args, settings, max_len); !s) return fail(s.message(), kExitUsage);

  auto opened = open_or_create_store(*args);
  if (!opened) return fail(opened.error(), exit_code_for(opened.error_code()));
  StoreAccess& access = **opened;
  std::optional<store::QuarantineEntry> under;
  if (auto s = read_record_seeds(*access.quarantine, *args, settings.seeds, under); !s) {
    return fail(s.message(), kExitUsage);
  }
  if (auto s = read_seed_inputs(args->positional(), read_symlinks_in_tree(*args), settings.seeds); !s) {
    return fail(s.message(), kExitUsage);
  }
  auto config = fuzz_config(*args, under);
  if (!config) return fail(config.error(), kExitUsage);
  settings.config = std::move(*config);
  std::size_t largest = 0;
  for (const auto& seed : settings.seeds) largest = std::max(largest, seed.bytes.size());
  settings.max_len = max_len.value_or(std::max<std::size_t>(4096, largest));
  settings.sandbox_binary = find_sandbox_binary();
  settings.journal_root = access.store.dir() + "/fuzz-inflight";

  auto recorder = FindingRecorder::open(access.store.db(), *access.quarantine, run_identity(settings.config), "fuzz",
                                        actor_name("fuzz"));
  if (!recorder) return fail(recorder.error(), kExitSetup);

  const bool json = args->flag("json");
  Progress progress = Progress::on_stderr("fuzz", static_cast<std::size_t>(settings.max_runs), args->flag("quiet"));
  show_session(settings, progress, json, access.store.dir());
  const std::string seeds = settings.seeds.empty() ? std::string("no seeds (one empty input)")
                                                   : std::to_string(settings.seeds.size()) +
                                                         (settings.seeds.size() == 1 ? " seed" : " seeds");
  std::fprintf(stderr, "pillbox fuzz: %s, %zu dictionary token%s, --seed %llu, store %s\n", seeds.c_str(),
               settings.dictionary.size(), settings.dictionary.size() == 1 ? "" : "s",
               static_cast<unsigned long long>(settings.rng_seed), access.store.dir().c_str());
  auto result = fuzz::run_fuzz(*recorder, settings);
  progress.finish();
  if (!result) return fail(result.error(), kExitSetup);
  return report_session(*result, settings, json);
}

}  // namespace pillbox::cli
