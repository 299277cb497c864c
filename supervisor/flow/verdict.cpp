#include "supervisor/flow/verdict.h"

namespace pillbox {

std::string_view to_string(Verdict::Type type) {
  switch (type) {
    case Verdict::Type::kOk: return "ok";
    case Verdict::Type::kQuarantined: return "quarantined";
    case Verdict::Type::kPoison: return "poison";
    case Verdict::Type::kGaveUp: return "gave-up";
    case Verdict::Type::kHeld: return "held";
  }
  return "unknown";
}

}  // namespace pillbox
