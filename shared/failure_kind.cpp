#include "shared/failure_kind.h"

#include "shared/enum_text.h"

namespace pillbox {

std::string_view to_string(Kind kind) {
  switch (kind) {
    case Kind::kOk: return "ok";
    case Kind::kCrash: return "crash";
    case Kind::kStackOverflow: return "stack-overflow";
    case Kind::kCpuLimit: return "cpu-limit";
    case Kind::kWallTimeout: return "wall-timeout";
    case Kind::kOom: return "oom";
    case Kind::kSeccompViolation: return "seccomp-violation";
    case Kind::kOutputLimit: return "output-limit";
    case Kind::kHandlerError: return "handler-error";
    case Kind::kProtocolError: return "protocol-error";
    case Kind::kKilled: return "killed";
    case Kind::kSandboxError: return "sandbox-error";
    case Kind::kSupervisorLost: return "supervisor-lost";
  }
  return "unknown";
}

std::optional<Kind> kind_from_string(std::string_view name) {
  return enum_from_text(kAllKinds, name);
}

bool is_deterministic(Kind kind) {
  switch (kind) {
    case Kind::kCrash:
    case Kind::kStackOverflow:
    case Kind::kCpuLimit:
    case Kind::kOom:
    case Kind::kSeccompViolation:
    case Kind::kOutputLimit:
    case Kind::kHandlerError:
      return true;
    case Kind::kOk:
    case Kind::kWallTimeout:
    case Kind::kProtocolError:
    case Kind::kKilled:
    case Kind::kSandboxError:
    case Kind::kSupervisorLost:
      return false;
  }
  return false;
}

}  // namespace pillbox
