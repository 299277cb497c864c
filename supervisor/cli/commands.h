#pragma once
// The `pillbox` subcommands. Each parses its arguments, calls the library
// and prints; their exit codes are below (README.md documents them).
namespace pillbox::cli {

inline constexpr int kExitOk = 0;
inline constexpr int kExitFailures = 1;
inline constexpr int kExitUsage = 2;
inline constexpr int kExitSetup = 3;
inline constexpr int kExitOutage = 4;  // run stopped by a suspected handler outage; held tasks remain
// Every task this run ran is ok, but some it did not run: another live pillbox
// process on the same store was running them (point 10 of issue 14). Not 0:
// this run cannot vouch for them; not 1: nothing failed here.
inline constexpr int kExitElsewhere = 5;

int run_command(int argc, char** argv);     // pillbox run
int doctor_command(int argc, char** argv);  // pillbox doctor
int results_command(int argc, char** argv); // pillbox results [KEY...]
int policy_command(int argc, char** argv);  // pillbox policy check|show
int reproduce_command(int argc, char** argv);   // pillbox reproduce ID
int minimize_command(int argc, char** argv);    // pillbox minimize ID
int fuzz_command(int argc, char** argv);        // pillbox fuzz
int quarantine_command(int argc, char** argv);  // pillbox quarantine list|show|stats|export|discard|purge
int submit_command(int argc, char** argv);      // pillbox submit --redis URL --stream NAME INPUT...
int worker_command(int argc, char** argv);      // pillbox worker --redis URL --stream NAME ...
int tasks_command(int argc, char** argv);       // pillbox tasks [--state S] [--key K] [--handler H] [--json]
int serve_command(int argc, char** argv);       // pillbox serve [--store DIR] [--listen HOST:PORT]

}  // namespace pillbox::cli
