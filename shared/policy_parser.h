#pragma once
// Reads and writes the human-editable policy format (docs/policy-format.md).
//
// Every error is one line, `ORIGIN:LINE: what is wrong; what to do`, or
// `ORIGIN: ...` when it concerns the whole text (too large, unreadable).
// Parsing never throws and never trusts its input: it is fuzzed.
#include <cstdint>
#include <string>
#include <string_view>

#include "shared/policy.h"
#include "shared/status.h"

namespace pillbox {

// Parses policy text. `origin` names the text in messages and becomes
// Policy::origin; `base_dir` is where relative `import_oci` paths are found
// (empty: the current directory).
Expected<Policy> parse_policy(std::string_view text, std::string_view origin,
                              const std::string& base_dir);

// Parses policy text that someone else wrote (a record's claim): as
// parse_policy, but it reads no file, so `import_oci` is an error (a record's
// text is format_policy output, which never has it).
Expected<Policy> parse_claimed_policy(std::string_view text, std::string_view origin);

// Reads and parses a policy file; relative imports resolve next to it.
Expected<Policy> load_policy_file(const std::string& path);

// `--policy` argument: a path when it contains '/' or ends in ".policy",
// otherwise the name of a shipped policy (see shared/embedded_policies.h).
Expected<Policy> resolve_policy(const std::string& name_or_path);

// Renders a policy back into the text format, with the allow list expanded
// (imports already applied): parse_policy(format_policy(p)) gives p again.
std::string format_policy(const Policy& policy);

// Sets one [limits] key ("cpu", "wall", "memory", "file_size", "open_files",
// "processes", "stack", "output") from text in the policy's units, with the
// same range checks as a policy file. The CLI's --cpu, --timeout (wall),
// --memory and --max-output flags go through here so both agree. The error
// message names the key but no file.
Status set_limit(Limits& limits, std::string_view key, std::string_view value);

// Adds `list` (absolute paths separated by blanks) to the host paths bound
// read-write into a read-only view, as `writable = ...` in a policy file
// does (and the CLI's --writable). No "." or ".." components, not "/".
Status add_writable(Isolation& isolation, std::string_view list);
// The same for paths shown read-only (`share = ...`, the CLI's --share).
Status add_shared(Isolation& isolation, std::string_view list);

// A duration in the policy's forms (500ms, 5s, 2m, 1h; a bare number is
// seconds), in milliseconds, within [min_ms, max_ms]; errors name `name`.
Expected<std::uint64_t> parse_duration_ms(std::string_view value, const std::string& name, std::uint64_t min_ms,
                                          std::uint64_t max_ms);

}  // namespace pillbox
