#pragma once
// pillbox quarantine import (docs/operator.md, 'pillbox quarantine import'):
// libFuzzer and AFL++ crash artifacts run once each in the sandbox; a
// failure becomes a quarantine record with the fingerprint `run` would give
// the same bytes, and an artifact that does not fail is only reported.
#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "shared/child_config.h"
#include "shared/status.h"
#include "supervisor/ops/finding_recorder.h"
#include "supervisor/io/input_files.h"
#include "supervisor/exec/launcher.h"

namespace pillbox {

struct Artifact {
  std::string path;      // absolute
  std::string tool;      // libfuzzer | afl++ | file (named on the command line, not recognized)
  std::string artifact;  // crash, oom, timeout, leak, slow-unit (libFuzzer); crashes, hangs (AFL++); file
  InputEntry file;       // how it is read (find_artifacts sets it): never through a symlink in a directory
};

// The artifact a file name says it is; nullopt when it is none. `path` may
// be relative; AFL++'s are recognized by their directory (crashes/, hangs/).
std::optional<Artifact> recognize_artifact(const std::string& path);

// Files named on the command line are taken whatever their name;
// directories are searched recursively for recognized artifacts only
// (supervisor/io/input_files.h: symlinks followed only if `symlinks` says so;
// an artifact that is not a regular file is kept, and its import reports it
// unreadable). Errors: a path that cannot be read, or is neither a regular
// file nor a directory. `ignored` counts directory entries that are not
// artifacts.
Expected<std::vector<Artifact>> find_artifacts(const std::vector<std::string>& paths, std::size_t& ignored,
                                               SymlinksInTree symlinks = SymlinksInTree::kRefuse);

// What became of one artifact. Text ("imported", "already", "ok",
// "not-run", "unreadable") only in what is printed (to_string).
enum class ImportStatus {
  kImported,    // a new record
  kAlready,     // a record with its fingerprint is on file
  kRunsOk,      // runs ok here: not recorded
  kNotRun,      // sandbox-error, or killed from outside: not recorded
  kUnreadable,  // the file could not be read
};
std::string_view to_string(ImportStatus status);

struct ImportedArtifact {
  Artifact artifact;
  std::string outcome_kind;      // how it ended here
  std::string fingerprint;
  std::string message;
  std::int64_t record_id = 0;    // its record (new, or the one already on file)
  ImportStatus status = ImportStatus::kUnreadable;
  std::string detail;            // for already, not-run and unreadable
};

struct ImportSettings {
  ChildConfig config;
  LaunchMode mode = LaunchMode::kZygote;
  std::string sandbox_binary;    // "" = find_sandbox_binary()
  std::size_t jobs = 1;
  std::function<void(const ImportedArtifact&)> on_artifact;
};

struct ImportResult {
  std::vector<ImportedArtifact> artifacts;  // in completion order
  int stop_signal = 0;
};

// Errors: the sandbox cannot start, or the store cannot be written.
Expected<ImportResult> import_artifacts(FindingRecorder& recorder, const std::vector<Artifact>& artifacts,
                                        const ImportSettings& settings);

}  // namespace pillbox
