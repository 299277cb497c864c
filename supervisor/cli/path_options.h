#pragma once
// The options about paths pillbox does not own, read the same way by every
// command that takes them: --out DIR and --out-mode MODE (`run`, `quarantine
// replay`), --follow-symlinks (`run`, `fuzz`, `quarantine import`).
#include <optional>
#include <vector>

#include "shared/status.h"
#include "supervisor/cli/args.h"
#include "supervisor/io/input_files.h"
#include "supervisor/io/result_files.h"

namespace pillbox::cli {

// out, out-mode.
extern const std::vector<OptionSpec> kOutOptions;

// --out DIR opened (created when missing) with --out-mode (default 0600);
// nullopt without --out. Errors (usage errors): a mode that is not octal
// permission bits, --out-mode without --out, a directory that cannot be
// created or written.
Expected<std::optional<ResultFiles>> read_result_files(const Args& args);

// --follow-symlinks: whether symlinks inside input directories are followed.
SymlinksInTree read_symlinks_in_tree(const Args& args);

}  // namespace pillbox::cli
