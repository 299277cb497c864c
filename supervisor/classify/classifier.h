#pragma once
// Execution -> Outcome: failure kind, symbolized frames, fingerprint
// (docs/architecture.md, 'How `classify` decides'). The kernel's wait status
// is the ground truth; what the child says only refines it, so a hostile
// child can mislead at most its own fingerprint.
#include "supervisor/classify/outcome.h"
#include "supervisor/classify/symbolizer.h"

namespace pillbox {

Outcome classify(const Execution& execution, Symbolizer& symbolizer);

}  // namespace pillbox
