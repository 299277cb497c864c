// pillbox quarantine import FILE|DIR... (--handler H [--arg K=V]... | -- CMD ARGS...)
// Thin over supervisor/ops/artifact_import.h.
#include <cstdio>
#include <nlohmann/json.hpp>

#include "supervisor/cli/child_options.h"
#include "supervisor/cli/commands.h"
#include "supervisor/cli/path_options.h"
#include "supervisor/cli/progress.h"
#include "supervisor/cli/quarantine_verbs.h"
#include "supervisor/cli/run_job.h"
#include "supervisor/exec/install_paths.h"
#include "supervisor/io/terminal_text.h"
#include "supervisor/ops/artifact_import.h"
#include "supervisor/store/actor.h"

namespace pillbox::cli {

int quarantine_import(const QuarantineContext& c) {
  const Args& args = c.args;
  if (args.positional().empty()) {
    return quarantine_error("import needs artifact files or directories (libFuzzer crash-*, oom-*, timeout-*; "
                            "AFL++ crashes/id:*)", kExitUsage);
  }
  auto config = read_child_config(args);
  if (!config) return quarantine_error(config.error(), kExitUsage);
  ImportSettings settings;
  if (auto s = read_launch_mode(args, settings.mode); !s) return quarantine_error(s.message(), kExitUsage);
  settings.config = std::move(*config);
  if (auto s = read_jobs(args, settings.jobs); !s) return quarantine_error(s.message(), kExitUsage);
  std::size_t ignored = 0;
  auto artifacts = find_artifacts(args.positional(), ignored, read_symlinks_in_tree(args));
  if (!artifacts) return quarantine_error(artifacts.error(), kExitUsage);
  if (artifacts->empty()) {
    return quarantine_error("no crash artifacts found (" + std::to_string(ignored) +
                                " other files ignored): looked for libFuzzer crash-/oom-/timeout-/leak-/slow-unit-<sha1> "
                                "files and AFL++ crashes/id:* and hangs/id:* files",
                            kExitUsage);
  }
  settings.sandbox_binary = find_sandbox_binary();
  auto recorder = FindingRecorder::open(c.database, c.quarantine, run_identity(settings.config), "import",
                                        actor_name("quarantine import"));
  if (!recorder) return quarantine_error(recorder.error(), kExitSetup);

  const bool json = args.flag("json");
  // Each artifact's line goes above the progress line; the counts say what
  // the artifacts came to (the failures imported by kind).
  Progress progress = Progress::on_stderr("import", artifacts->size(), c.args.flag("quiet"));
  std::size_t done = 0;
  settings.on_artifact = [&](const ImportedArtifact& a) {
    progress.hide();
    if (json) {
      nlohmann::json j = {{"file", a.artifact.path}, {"tool", a.artifact.tool}, {"artifact", a.artifact.artifact},
                          {"status", std::string(to_string(a.status))},      {"kind", a.outcome_kind},  {"fingerprint", a.fingerprint},
                          {"message", a.message}};
      if (a.record_id) j["record"] = a.record_id;
      if (!a.detail.empty()) j["detail"] = a.detail;
      std::printf("%s\n", j.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace).c_str());
    } else {
      // Paths come from a fuzzer's output directory: shown safe for a terminal.
      const std::string file = table_cell(a.artifact.path, 400);
      if (a.status == ImportStatus::kImported) {
        std::printf("imported %s: record %lld, %s %s\n", file.c_str(), static_cast<long long>(a.record_id),
                    a.outcome_kind.c_str(), a.fingerprint.c_str());
      } else if (a.status == ImportStatus::kAlready) {
        std::printf("already on file %s: %s\n", file.c_str(), table_cell(a.detail, 400).c_str());
      } else if (a.status == ImportStatus::kRunsOk) {
        std::printf("not imported %s: it runs ok under this handler (the fuzzer's target differs, or the bug is "
                    "fixed)\n", file.c_str());
      } else {
        std::printf("not imported %s: %s\n", file.c_str(), table_cell(a.detail, 400).c_str());
      }
    }
    std::fflush(stdout);
    if (a.status == ImportStatus::kImported) progress.count(a.outcome_kind.empty() ? "imported" : a.outcome_kind);
    else if (a.status == ImportStatus::kAlready) progress.count("already on file");
    else if (a.status == ImportStatus::kRunsOk) progress.count("run ok here");
    else progress.count("not imported");
    progress.update(++done);
    progress.show();
  };
  auto result = import_artifacts(*recorder, *artifacts, settings);
  progress.finish();
  if (!result) return quarantine_error(result.error(), kExitSetup);
  std::size_t imported = 0, already = 0, not_failing = 0, not_run = 0, unreadable = 0;
  for (const auto& a : result->artifacts) {
    if (a.status == ImportStatus::kImported) ++imported;
    else if (a.status == ImportStatus::kAlready) ++already;
    else if (a.status == ImportStatus::kRunsOk) ++not_failing;
    else if (a.status == ImportStatus::kNotRun) ++not_run;
    else ++unreadable;
  }
  // stderr: with --json too, stdout stays JSON lines.
  std::fprintf(stderr,
               "pillbox quarantine: import: %zu artifact%s: %zu imported, %zu already on file, %zu run ok here, "
               "%zu not run (sandbox or outside signal), %zu unreadable%s\n",
               artifacts->size(), artifacts->size() == 1 ? "" : "s", imported, already, not_failing, not_run, unreadable,
               ignored ? (", " + std::to_string(ignored) + (ignored == 1 ? " other file" : " other files") + " ignored").c_str()
                       : "");
  if (result->stop_signal != 0) return 128 + result->stop_signal;
  if (not_run > 0) return kExitSetup;
  return not_failing + unreadable > 0 ? kExitFailures : kExitOk;
}

}  // namespace pillbox::cli
