#pragma once
// `pillbox doctor`: what this host allows and what pillbox falls back to.
// Every check runs the real mechanism (in a throwaway child process where it
// changes process state), so the answer is a fact about this host, not a guess.
#include <string>
#include <vector>

namespace pillbox {

struct DoctorCheck {
  std::string name;      // "seccomp", "network namespace", "memory cgroup", ...
  bool ok = false;
  std::string detail;    // what was found
  std::string fallback;  // when not ok: what pillbox does instead ("" when ok)
};

struct DoctorReport {
  std::vector<DoctorCheck> checks;
  bool usable = false;   // pillbox can run tasks here at all (seccomp + fork work)
};

// `sandbox_binary` is used for the end-to-end check (one echo task through a
// zygote). `policies` (names or files) are checked too, after the shipped
// ones: a policy that cannot be read, or that switches confinement off with
// allow_unsafe = yes, is a NO line (it does not make the host unusable).
DoctorReport run_doctor(const std::string& sandbox_binary, const std::vector<std::string>& policies = {});

}  // namespace pillbox
