// pillbox: run crash-prone work safely. Thin dispatch to the subcommands.
#include <malloc.h>

#include <cstdio>
#include <cstring>
#include <string>

#include "supervisor/cli/commands.h"

namespace {

const char* kUsage =
    "usage: pillbox <command> [options]\n"
    "\n"
    "commands:\n"
    "  run        run every input in its own confined child, classify failures\n"
    "  doctor     show what this host allows (seccomp, namespaces, cgroups) and the fallbacks\n"
    "  policy     check or show a policy file\n"
    "  quarantine list, show, stats, export, discard, purge, replay or import quarantined payloads\n"
    "  tasks      every task in the store: pending, retrying, held, gave-up, ok or quarantined\n"
    "  reproduce  run a quarantined payload again N times: reliable or flaky?\n"
    "  minimize   shrink a quarantined payload while it still fails the same way\n"
    "  fuzz       mutate seeds and run every candidate in the sandbox; quarantine new failures\n"
    "  submit     add the tasks of inputs to a Redis stream, for a fleet of workers\n"
    "  worker     run the tasks of a Redis stream as one worker of a fleet\n"
    "  version    print the version\n"
    "\n"
    "`pillbox <command> --help` describes a command. Exit codes: 0 all ok, 1 some tasks\n"
    "failed, 2 usage or input error, 3 setup error, 4 run stopped by a suspected outage,\n"
    "5 some tasks were running in another pillbox process on the same store.\n";

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
  if (argc < 2 || std::strcmp(argv[1], "--help") == 0 || std::strcmp(argv[1], "-h") == 0 ||
      std::strcmp(argv[1], "help") == 0) {
    std::fputs(kUsage, argc < 2 ? stderr : stdout);
    return argc < 2 ? kExitUsage : kExitOk;
  }
  const std::string command = argv[1];
  if (command == "run") return run_command(argc, argv);
  if (command == "doctor") return doctor_command(argc, argv);
  if (command == "policy") return policy_command(argc, argv);
  if (command == "quarantine") return quarantine_command(argc, argv);
  if (command == "reproduce") return reproduce_command(argc, argv);
  if (command == "minimize") return minimize_command(argc, argv);
  if (command == "fuzz") return fuzz_command(argc, argv);
  if (command == "submit") return submit_command(argc, argv);
  if (command == "worker") return worker_command(argc, argv);
  if (command == "tasks") return tasks_command(argc, argv);
  if (command == "version" || command == "--version") {
    std::printf("pillbox %s\n", PILLBOX_VERSION);
    return kExitOk;
  }
  std::fprintf(stderr, "pillbox: unknown command '%s'\n\n%s", command.c_str(), kUsage);
  return kExitUsage;
}
