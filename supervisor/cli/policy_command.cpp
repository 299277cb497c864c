// pillbox policy check FILE... | pillbox policy show NAME|FILE
#include <cstdio>
#include <string>

#include "shared/policy_parser.h"
#include "supervisor/cli/commands.h"

namespace pillbox::cli {

namespace {

const char* kHelp =
    "usage: pillbox policy check NAME|FILE... validate policies; errors point at the line, unsafe\n"
    "                                        settings (allow_unsafe = yes) are warned about\n"
    "       pillbox policy show NAME|FILE    print a policy with every default filled in\n"
    "\n"
    "Shipped policies: strict (in-process parsers), exec (arbitrary programs).\n"
    "The format is described in docs/policy-format.md.\n";

}  // namespace

int policy_command(int argc, char** argv) {
  if (argc < 3 || std::string(argv[2]) == "--help") {
    std::fputs(kHelp, argc < 3 ? stderr : stdout);
    return argc < 3 ? kExitUsage : kExitOk;
  }
  const std::string verb = argv[2];
  if (verb == "check") {
    if (argc < 4) {
      std::fputs("pillbox policy check: give at least one policy name or file\n", stderr);
      return kExitUsage;
    }
    int rc = kExitOk;
    for (int i = 3; i < argc; ++i) {
      auto policy = resolve_policy(argv[i]);
      if (!policy) {
        std::fprintf(stderr, "%s\n", policy.error().c_str());
        rc = kExitUsage;
        continue;
      }
      std::printf("%s: ok (policy '%s', %zu syscalls allowed, default action %s)\n", argv[i], policy->name.c_str(),
                  policy->seccomp.allow.size(), std::string(to_string(policy->seccomp.default_action)).c_str());
      for (const std::string& unsafe : unsafe_settings(*policy)) {
        std::fprintf(stderr, "%s: warning: unsafe (allowed by allow_unsafe = yes): %s\n", argv[i], unsafe.c_str());
      }
    }
    return rc;
  }
  if (verb == "show") {
    if (argc != 4) {
      std::fputs("pillbox policy show: give one policy name or file\n", stderr);
      return kExitUsage;
    }
    auto policy = resolve_policy(argv[3]);
    if (!policy) {
      std::fprintf(stderr, "%s\n", policy.error().c_str());
      return kExitUsage;
    }
    std::fputs(format_policy(*policy).c_str(), stdout);
    return kExitOk;
  }
  std::fprintf(stderr, "pillbox policy: unknown verb '%s'\n\n%s", verb.c_str(), kHelp);
  return kExitUsage;
}

}  // namespace pillbox::cli
