#pragma once
// The closed set of outcomes of one task (docs/architecture.md, 'Failure
// kinds and the classifier'). Every place that switches on Kind must handle
// every value; to_string is exhaustive.
#include <cstdint>
#include <optional>
#include <string_view>

namespace pillbox {

enum class Kind : std::uint8_t {
  kOk,
  kCrash,             // SIGSEGV/SIGBUS/SIGILL/SIGFPE/SIGABRT/SIGTRAP
  kStackOverflow,     // crash in the stack guard, or recursing frames
  kCpuLimit,          // RLIMIT_CPU: SIGXCPU, then SIGKILL
  kWallTimeout,       // alive past the wall deadline; killed by the supervisor
  kOom,               // cgroup OOM kill, or allocation failure under RLIMIT_AS
  kSeccompViolation,  // a denied syscall (named in Outcome::syscall)
  kOutputLimit,       // result or file size over its cap (incl. SIGXFSZ)
  kHandlerError,      // the handler failed cleanly with a message
  kProtocolError,     // malformed, oversized, forged or missing frames
  kKilled,            // SIGKILL (or another fatal signal) from outside
  kSandboxError,      // the sandbox could not be set up: never the payload's fault
  kSupervisorLost,    // the supervisor itself died while the task ran (ledger: attempt never finished)
};

inline constexpr Kind kAllKinds[] = {
    Kind::kOk,           Kind::kCrash,        Kind::kStackOverflow,    Kind::kCpuLimit,
    Kind::kWallTimeout,  Kind::kOom,          Kind::kSeccompViolation, Kind::kOutputLimit,
    Kind::kHandlerError, Kind::kProtocolError, Kind::kKilled,          Kind::kSandboxError,
    Kind::kSupervisorLost,
};

std::string_view to_string(Kind kind);
std::optional<Kind> kind_from_string(std::string_view name);

// True for kinds where the same payload fails the same way again
// (docs/architecture.md, 'Verdicts: retries, quarantine, outages').
bool is_deterministic(Kind kind);

}  // namespace pillbox
