#pragma once
// Execution -> Outcome: decides the failure kind (DESIGN.md §4), symbolizes
// crash frames and computes the fingerprint. The kernel's wait status is the
// ground truth; what the child said (frames, crash report) only refines it,
// so a hostile child can mislead at most its own fingerprint.
#include "supervisor/classify/outcome.h"
#include "supervisor/classify/symbolizer.h"

namespace pillbox {

Outcome classify(const Execution& execution, Symbolizer& symbolizer);

}  // namespace pillbox
