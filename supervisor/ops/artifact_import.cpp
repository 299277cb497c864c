#include "supervisor/ops/artifact_import.h"

#include <algorithm>
#include <cerrno>
#include <csignal>
#include <cstring>
#include <filesystem>
#include <map>
#include <nlohmann/json.hpp>
#include <regex>

#include "shared/sha256.h"
#include "shared/task_input.h"
#include "supervisor/exec/dispatcher.h"
#include "supervisor/exec/task_source.h"
#include "supervisor/ops/payload_runner.h"

namespace pillbox {

std::string_view to_string(ImportStatus status) {
  switch (status) {
    case ImportStatus::kImported: return "imported";
    case ImportStatus::kAlready: return "already";
    case ImportStatus::kRunsOk: return "ok";
    case ImportStatus::kNotRun: return "not-run";
    case ImportStatus::kUnreadable: return "unreadable";
  }
  return "unknown";
}
namespace {

namespace fs = std::filesystem;

// libFuzzer names artifacts <prefix><kind>-<sha1 of the input>; the prefix
// (-artifact_prefix) may be a directory or any string, e.g. "wire-".
const std::regex& libfuzzer_name() {
  static const std::regex re("(crash|oom|timeout|leak|slow-unit)-[0-9a-f]{40}$");
  return re;
}

class ImportPlanner final : public PayloadPlanner {
 public:
  ImportPlanner(FindingRecorder& recorder, const std::vector<Artifact>& artifacts, const ImportSettings& settings,
                ImportResult& result)
      : recorder_(recorder), artifacts_(artifacts), settings_(settings), result_(result) {}

  std::optional<Task> next() override {
    while (next_ < artifacts_.size()) {
      const std::size_t i = next_++;
      auto bytes = read_input(artifacts_[i].file, kMaxPayloadBytes);
      if (!bytes) {
        report({artifacts_[i], "", "", "", 0, ImportStatus::kUnreadable, bytes.error()});
        continue;
      }
      started_ms_[i] = store::now_ms();
      return Task{artifacts_[i].path, std::move(*bytes), i + 1};
    }
    return std::nullopt;
  }

  void on_outcome(const Task& task, const Outcome& o) override {
    const std::size_t i = task.ref - 1;
    const Artifact& a = artifacts_[i];
    ImportedArtifact imported{a, std::string(to_string(o.kind)), o.fingerprint, o.message, 0, ImportStatus::kUnreadable, ""};
    if (!error_.is_ok()) return;  // the store failed: nothing more is recorded
    if (o.kind == Kind::kOk) {
      imported.status = ImportStatus::kRunsOk;
      report(std::move(imported));
      return;
    }
    // Not the payload's doing: the sandbox could not start it, a signal
    // from outside (the host's OOM killer, an operator) ended it, or the
    // child failed before it asked for the payload (a plugin's init).
    if (o.kind == Kind::kSandboxError || o.kind == Kind::kKilled || o.kind == Kind::kSupervisorLost ||
        o.before_payload) {
      imported.status = ImportStatus::kNotRun;
      imported.detail = std::string(to_string(o.kind)) + ": " + o.message + " (not the artifact's fault; import it again)";
      report(std::move(imported));
      return;
    }
    const nlohmann::json origin = {{"tool", a.tool}, {"artifact", a.artifact}, {"file", a.path}};
    // Keyed by content, not by file name: the same artifact downloaded again
    // into another directory (each CI run's) is the same finding.
    Finding f;
    f.key = "import:" + sha256_hex(task.payload).substr(0, 16);
    f.payload = task.payload;
    f.outcome = o;
    f.origin = origin.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
    f.started_ms = started_ms_[i];
    f.ended_ms = store::now_ms();
    f.solo = settings_.jobs <= 1;
    auto recorded = recorder_.record(f, "imported from " + a.path + " (" + a.tool + " " + a.artifact + ")");
    if (!recorded) {
      if (error_.is_ok()) error_ = Status::error(recorded.error());
      return;
    }
    imported.record_id = recorded->record_id;
    if (recorded->already) {
      imported.status = ImportStatus::kAlready;
      imported.detail = "the store has these bytes as " + std::string(to_string(*recorded->already)) +
                        " under this handler" +
                        (recorded->record_id ? " (record " + std::to_string(recorded->record_id) + ")" : "");
    } else {
      imported.status = ImportStatus::kImported;
    }
    report(std::move(imported));
  }

  const Status& error() const { return error_; }

 private:
  void report(ImportedArtifact imported) {
    if (settings_.on_artifact) settings_.on_artifact(imported);
    result_.artifacts.push_back(std::move(imported));
  }

  FindingRecorder& recorder_;
  const std::vector<Artifact>& artifacts_;
  const ImportSettings& settings_;
  ImportResult& result_;
  std::size_t next_ = 0;
  std::map<std::size_t, std::int64_t> started_ms_;
  Status error_;
};

}  // namespace

std::optional<Artifact> recognize_artifact(const std::string& path) {
  const fs::path p(path);
  const std::string name = p.filename().string();
  std::smatch m;
  if (std::regex_search(name, m, libfuzzer_name())) {
    return Artifact{path, "libfuzzer", m[1].str(), {}};
  }
  // AFL++: <out>/<fuzzer>/crashes/id:000000,sig:11,src:...; "id_" where ':'
  // is not allowed in file names. Its README.txt sits beside them.
  const std::string dir = p.parent_path().filename().string();
  if ((dir == "crashes" || dir == "hangs") && (name.rfind("id:", 0) == 0 || name.rfind("id_", 0) == 0)) {
    return Artifact{path, "afl++", dir, {}};
  }
  return std::nullopt;
}

Expected<std::vector<Artifact>> find_artifacts(const std::vector<std::string>& paths, std::size_t& ignored,
                                               SymlinksInTree symlinks) {
  std::vector<Artifact> found;
  for (const auto& given : paths) {
    std::error_code ec;
    const std::string absolute = fs::absolute(given, ec).string();
    if (ec) return Error{"cannot read input '" + given + "': " + ec.message()};
    auto listed = list_input(absolute, symlinks);
    if (!listed) return Error{listed.error()};
    for (auto& file : *listed) {
      const std::string path = fs::path(file.path).lexically_normal().string();
      if (file.path == absolute) {
        // Named on the command line: must be a file.
        if (!file.skipped.empty()) {
          return Error{"input '" + given + "' is " + file.skipped + " (give artifact files or directories)"};
        }
        Artifact a = recognize_artifact(path).value_or(Artifact{path, "file", "file", {}});
        a.file = std::move(file);
        found.push_back(std::move(a));
      } else if (auto a = recognize_artifact(path)) {
        // One that is not a regular file is kept, to be reported as
        // unreadable (read_input says what it is), not dropped.
        a->file = std::move(file);
        found.push_back(std::move(*a));
      } else {
        ++ignored;
      }
    }
  }
  return found;
}

Expected<ImportResult> import_artifacts(FindingRecorder& recorder, const std::vector<Artifact>& artifacts,
                                        const ImportSettings& settings) {
  ImportResult result;
  ImportPlanner planner(recorder, artifacts, settings, result);
  const RunSettings run = planned_run_settings(settings.config, settings.mode, std::min(settings.jobs, artifacts.size()),
                                               settings.sandbox_binary);
  auto report = run_planned(run, planner);
  if (!report) return Error{report.error()};
  if (!planner.error().is_ok()) return Error{planner.error().message()};
  result.stop_signal = report->stop_signal;
  return result;
}

}  // namespace pillbox
