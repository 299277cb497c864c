#pragma once
// The options about paths pillbox does not own, read the same way by every
// command that takes them: --out DIR and --out-mode MODE (`run`, `quarantine
// replay`), --follow-symlinks (`run`, `fuzz`, `quarantine import`).
#include <optional>
#include <string>
#include <string_view>
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

// A successful result written into --out's directory: the file's path, or
// "" when it could not be written, with the reason on stderr after
// "pillbox COMMAND: " and `failed` set (the command ends with exit code 2).
// `variant`: see ResultFiles::write.
std::string write_result_file(ResultFiles& results, std::string_view key, std::string_view output,
                              const std::string& command, bool& failed, std::string_view variant = {});

// --follow-symlinks: whether symlinks inside input directories are followed.
SymlinksInTree read_symlinks_in_tree(const Args& args);

}  // namespace pillbox::cli
