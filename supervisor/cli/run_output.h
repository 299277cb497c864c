#pragma once
// How outcomes are shown: one JSON object per task (`--json`), a one-line
// human form, and the end-of-run summary (counts per kind and fingerprint).
#include <cstdint>
#include <map>
#include <string>

#include "supervisor/classify/outcome.h"
#include "supervisor/exec/dispatcher.h"
#include "supervisor/exec/task_source.h"
#include "supervisor/flow/task_flow.h"

namespace pillbox {

// The record of `pillbox run --json`. The result goes in "output" (valid
// UTF-8), "output_b64" (anything else) or, when output_file is given, only
// its path in "output_file". With a verdict: "verdict", "attempts" and, for
// a quarantined payload, "quarantine_id".
std::string outcome_json(const Task& task, const Outcome& outcome, const std::string* output_file,
                         const Verdict* verdict = nullptr);

// One line of --json on stdout, flushed: a reader sees each task as it ends.
void print_json_line(const std::string& line);

// "ok      key  12 ms" / "crash   key  pb1-...  parse_header < main  killed by SIGSEGV"
// With a verdict other than ok: "... -> quarantined #12 after 2 attempts".
std::string outcome_line(const Task& task, const Outcome& outcome, const Verdict* verdict = nullptr);

class RunSummary {
 public:
  void add(const Task& task, const Outcome& outcome);
  // An outcome added earlier no longer stands (its verdict was taken back).
  void remove(const Outcome& outcome);
  std::string render(double seconds, const RunReport& report, const FlowReport* flow = nullptr,
                     const std::string& store_dir = "") const;
  std::size_t failed() const { return failed_; }

 private:
  struct Group {
    Kind kind = Kind::kOk;
    std::size_t count = 0;
    std::string crash_state;  // "a < b < c"
    std::string example_key;
    std::string message;
  };
  std::size_t total_ = 0;
  std::size_t failed_ = 0;
  std::size_t ok_empty_ = 0;  // ok with an empty result: 300 of 300 means the command read nothing
  std::map<Kind, std::size_t> by_kind_;
  std::map<std::string, Group> by_fingerprint_;
};

}  // namespace pillbox
