// pillbox: run crash-prone work safely. Thin dispatch to the subcommands.
#include <malloc.h>
#include <sys/resource.h>

#include <algorithm>
#include <cstdio>
#include <cstring>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "supervisor/cli/args.h"
#include "supervisor/cli/commands.h"
#include "supervisor/cli/exit_code.h"
#include "supervisor/cli/helper_check.h"
#include "supervisor/io/nearest_word.h"

namespace {

const char* kUsage =
    "usage: pillbox [--store DIR] <command> [options]\n"
    "\n"
    "commands:\n"
    "  run        run every input in its own confined child, classify failures\n"
    "  results    the results of ok tasks the store kept, by key, to stdout or files\n"
    "  doctor     show what this host allows (seccomp, namespaces, cgroups) and the fallbacks\n"
    "  policy     check or show a policy file\n"
    "  quarantine list, show, stats, export, discard, purge, replay or import quarantined payloads\n"
    "  tasks      every task in the store: pending, retrying, held, gave-up, ok or quarantined\n"
    "  reproduce  run a quarantined payload again N times: reliable or flaky?\n"
    "  minimize   shrink a quarantined payload while it still fails the same way\n"
    "  fuzz       mutate seeds and run every candidate in the sandbox; quarantine new failures\n"
    "  submit     add the tasks of inputs to a Redis stream, for a fleet of workers\n"
    "  worker     run the tasks of a Redis stream as one worker of a fleet\n"
    "  serve      a web console over the store (or the fleet's quarantine): records, tasks, a JSON API\n"
    "  version    print the version (--json: as a JSON object)\n"
    "  help       `pillbox help COMMAND [VERB]` is `pillbox COMMAND [VERB] --help`\n"
    "\n"
    "`pillbox <command> --help` describes a command. --store DIR before the command is the\n"
    "command's own --store (for those that take one). Short options, the same in every command:\n"
    "-h --help, -j --jobs, -q --quiet, -n --dry-run, -o --out/--output.\n"
    "Exit codes: 0 all ok, 1 some tasks failed, 2 usage or input error, 3 setup error,\n"
    "4 run stopped by a suspected outage, 5 some tasks were running in another pillbox process on the\n"
    "same store.\n";

const char* kVersionHelp =
    "usage: pillbox version [--json]\n\n"
    "Prints the version: `pillbox VERSION`, or with --json one object {\"version\": \"VERSION\"}.\n";

using Command = int (*)(int, char**);

int version_command(int argc, char** argv) {
  using namespace pillbox::cli;
  int exit_code = kExitOk;
  auto args = parse_command(argc, argv, 2, {{"json", false}}, "version", kVersionHelp, exit_code);
  if (!args) return exit_code;
  if (!args->positional().empty()) {
    return command_error("version", "unexpected argument '" + args->positional().front() +
                                        "' (see: pillbox version --help)", kExitUsage);
  }
  if (args->flag("json")) {
    std::printf("%s\n", nlohmann::json{{"version", PILLBOX_VERSION}}.dump().c_str());
  } else {
    std::printf("pillbox %s\n", PILLBOX_VERSION);
  }
  return kExitOk;
}

struct NamedCommand {
  const char* name;
  Command run;
};

const NamedCommand kCommands[] = {
    {"run", pillbox::cli::run_command},
    {"results", pillbox::cli::results_command},
    {"doctor", pillbox::cli::doctor_command},
    {"policy", pillbox::cli::policy_command},
    {"quarantine", pillbox::cli::quarantine_command},
    {"reproduce", pillbox::cli::reproduce_command},
    {"minimize", pillbox::cli::minimize_command},
    {"fuzz", pillbox::cli::fuzz_command},
    {"submit", pillbox::cli::submit_command},
    {"worker", pillbox::cli::worker_command},
    {"tasks", pillbox::cli::tasks_command},
    {"serve", pillbox::cli::serve_command},
    {"version", version_command},
};

// The commands whose first argument is a verb of their own (pillbox quarantine
// list): a --store given before the command goes after that verb.
bool has_verbs(const std::string& command) { return command == "quarantine" || command == "policy"; }

Command find_command(const std::string& name) {
  for (const auto& c : kCommands) {
    if (name == c.name) return c.run;
  }
  return nullptr;
}

int unknown_command(const std::string& name) {
  std::vector<std::string> names = {"help"};
  for (const auto& c : kCommands) names.emplace_back(c.name);
  if (auto near = pillbox::nearest_word(name, names)) {
    std::fprintf(stderr, "pillbox: unknown command '%s'; did you mean '%s'? (see: pillbox --help)\n", name.c_str(),
                 near->c_str());
  } else {
    std::fprintf(stderr, "pillbox: unknown command '%s'\n\n%s", name.c_str(), kUsage);
  }
  return pillbox::cli::kExitUsage;
}

}  // namespace

int main(int argc, char** argv) {
  using namespace pillbox::cli;
  // Keep freed heap instead of returning it to the kernel after every
  // ledger statement: SQLite frees and reallocates per statement, and each
  // trim-and-regrow of the heap cost about 1.2 ms of CPU per task here
  // (brk, and TLB shootdowns on the other cores; bench/README.md). The
  // supervisor's heap is small; 64 MiB of slack is the most it keeps.
  ::mallopt(M_TRIM_THRESHOLD, 64 << 20);
  ::mallopt(M_TOP_PAD, 1 << 20);
  // Each job slot holds a few fds (wire sockets, libzmq's own, the child's
  // streams, cgroup files): --jobs 100 needs more than the common soft limit
  // of 1024. Raised toward the hard limit, capped (a helper that closes
  // every fd up to the limit must not loop a million times); tasks get
  // their policy's own limit.
  if (struct rlimit files{}; ::getrlimit(RLIMIT_NOFILE, &files) == 0 && files.rlim_cur < files.rlim_max) {
    files.rlim_cur = std::min<rlim_t>(files.rlim_max, std::max<rlim_t>(files.rlim_cur, 16384));
    (void)::setrlimit(RLIMIT_NOFILE, &files);
  }
  // The words the command sees, as pointers into argv itself: an option that
  // overwrites its secret value in place (OptionSpec::secret) must overwrite
  // what /proc/PID/cmdline shows, not a copy.
  std::vector<char*> words(argv, argv + argc);
  // --store DIR (or --store=DIR) before the command: the command's own --store.
  std::vector<char*> store;
  if (words.size() > 1 && (std::strcmp(words[1], "--store") == 0 || std::strncmp(words[1], "--store=", 8) == 0)) {
    const bool joined = words[1][7] == '=';
    if (!joined && words.size() < 3) {
      std::fputs("pillbox: option --store needs a value (see: pillbox --help)\n", stderr);
      return kExitUsage;
    }
    store.assign(words.begin() + 1, words.begin() + (joined ? 2 : 3));
    words.erase(words.begin() + 1, words.begin() + (joined ? 2 : 3));
  }
  if (!store.empty() && words.size() > 1 && std::strncmp(words[1], "--store", 7) == 0) {
    std::fputs("pillbox: option --store given twice (see: pillbox --help)\n", stderr);
    return kExitUsage;
  }
  if (words.size() < 2) {
    std::fputs(kUsage, stderr);
    return kExitUsage;
  }
  std::string command = words[1];
  if (command == "--help" || command == "-h" || (command == "help" && words.size() == 2)) {
    std::fputs(kUsage, stdout);
    return kExitOk;
  }
  if (command == "--version") command = "version";
  static char help_flag[] = "--help";
  if (command == "help") {  // pillbox help COMMAND [VERB]: pillbox COMMAND [VERB] --help
    if (words.size() > 4) {
      std::fputs("pillbox help: give one command and at most one of its verbs (e.g. pillbox help quarantine list)\n",
                 stderr);
      return kExitUsage;
    }
    words.erase(words.begin() + 1);
    words.push_back(help_flag);
    command = words[1];
  }
  const Command run = find_command(command);
  if (run == nullptr) return unknown_command(command);
  if (!store.empty()) {
    // After the command, and after its verb when it has verbs: where the
    // command reads its options. A command without --store says so.
    std::size_t at = 2;
    if (has_verbs(command)) at = words.size() > 2 && words[2][0] != '-' ? 3 : words.size();
    words.insert(words.begin() + static_cast<std::ptrdiff_t>(at), store.begin(), store.end());
  }
  words.push_back(nullptr);
  const int count = static_cast<int>(words.size() - 1);
  if (const int code = check_helpers_for(count, words.data()); code >= 0) return code;
  return run(count, words.data());
}
