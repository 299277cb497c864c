// pillbox doctor [--policy NAME|FILE]... [--json]
#include <cstdio>
#include <nlohmann/json.hpp>

#include "supervisor/cli/args.h"
#include "supervisor/cli/commands.h"
#include "supervisor/ops/doctor.h"
#include "supervisor/exec/install_paths.h"

namespace pillbox::cli {

namespace {

const char* kHelp =
    "usage: pillbox doctor [--policy NAME|FILE]... [--json]\n\n"
    "Says where pillbox found its helpers (the sandbox binary, the crash library, the pdf-text\n"
    "module), checks what this host allows (seccomp, namespaces, cgroups, privilege drop) by\n"
    "trying each for real, runs one task end to end, and says what pillbox falls back to where a\n"
    "feature is missing. The shipped policies and each --policy are checked too: a policy\n"
    "that switches confinement off (allow_unsafe = yes) is a NO line.\n"
    "Exit code 0 when tasks can run here, 3 when they cannot.\n";

}  // namespace

int doctor_command(int argc, char** argv) {
  int exit_code = kExitOk;
  auto args = parse_command(argc, argv, 2, {{"json", false}, {"help", false}, {"policy", true, true}}, "doctor", kHelp,
                            exit_code);
  if (!args) return exit_code;
  const DoctorReport report = run_doctor(find_sandbox_binary(), args->values("policy"));
  if (args->flag("json")) {
    nlohmann::json j;
    j["usable"] = report.usable;
    for (const auto& c : report.checks) {
      j["checks"].push_back({{"name", c.name}, {"ok", c.ok}, {"detail", c.detail}, {"fallback", c.fallback}});
    }
    std::puts(j.dump(2).c_str());
  } else {
    for (const auto& c : report.checks) {
      std::printf("%-4s %-40s %s\n", c.ok ? "ok" : "NO", c.name.c_str(), c.detail.c_str());
      if (!c.ok && !c.fallback.empty()) std::printf("     %-40s -> %s\n", "", c.fallback.c_str());
    }
    std::printf("\n%s\n", report.usable ? "pillbox can run tasks on this host." : "pillbox cannot run tasks on this host (see above).");
  }
  return report.usable ? kExitOk : kExitSetup;
}

}  // namespace pillbox::cli
