#pragma once
// How many items a source from open_inputs() (input_source.h) gives before
// its end, for a progress bar: files and directories are listed before the
// run, so their count is known up front; JSON lines on stdin are a stream
// with no known end (nullopt), as is any other source.
#include <cstddef>
#include <optional>

#include "supervisor/flow/input_source.h"

namespace pillbox {

std::optional<std::size_t> known_total(const TaskSource& source);

}  // namespace pillbox
