#pragma once
// Execution -> Outcome: decides the failure kind, symbolizes crash frames
// and computes the fingerprint (docs/architecture.md, 'Failure kinds and the
// classifier'). The kernel's wait status is the ground truth; what the child
// said (frames, crash report) only refines it, so a hostile child can mislead
// at most its own fingerprint.
#include "supervisor/classify/outcome.h"
#include "supervisor/classify/symbolizer.h"

namespace pillbox {

Outcome classify(const Execution& execution, Symbolizer& symbolizer);

}  // namespace pillbox
