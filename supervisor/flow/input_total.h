#pragma once
// How many items a source from open_inputs() (input_source.h) gives, for a
// progress bar: known for files and directories (listed before the run),
// nullopt for stdin or any other source.
#include <cstddef>
#include <optional>

#include "supervisor/flow/input_source.h"

namespace pillbox {

std::optional<std::size_t> known_total(const TaskSource& source);

}  // namespace pillbox
