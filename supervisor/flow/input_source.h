#pragma once
// Where tasks come from: files, directories (recursive) and JSON lines on
// stdin, in the order given. Paths are checked before the run starts (a
// missing or unreadable input, or one that is not a regular file or a
// directory, is a usage error, not a failed task); entries of a directory
// that are not regular files (supervisor/io/input_files.h) come out as input
// errors where they sort. stdin is read on its own thread so a slow producer
// never stalls running tasks.
#include <cstdint>
#include <istream>
#include <memory>
#include <string>
#include <vector>

#include "shared/status.h"
#include "shared/task_input.h"
#include "supervisor/exec/task_source.h"
#include "supervisor/io/input_files.h"

namespace pillbox {

// `inputs` are paths or "-" (JSON lines on `stdin_fd`); `symlinks` says
// whether symlinks below a named directory are followed (--follow-symlinks).
// Errors: one line, ready to print ("cannot read input 'x': No such file or
// directory", "input '/dev/zero' is a character device, not a regular file
// (...)").
Expected<std::unique_ptr<TaskSource>> open_inputs(const std::vector<std::string>& inputs, int stdin_fd = 0,
                                                  SymlinksInTree symlinks = SymlinksInTree::kRefuse);

// Parses one JSON line: {"key": "...", "payload": "text"} or {"payload_b64":
// "..."}. The key is a string; without one (or null) it is content_key(), so
// that it does not change when lines move. A key of another type is an
// error naming the line. Sets payload_sha256.
Expected<Task> parse_task_line(std::string_view line, std::uint64_t line_number);

// The key of a JSON line without one: "sha256:" + 16 hex digits of the payload's SHA-256.
std::string content_key(const std::string& payload_sha256);

}  // namespace pillbox
