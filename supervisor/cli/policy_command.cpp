// pillbox policy check NAME|FILE... | pillbox policy show NAME|FILE
#include <cstdio>
#include <nlohmann/json.hpp>
#include <sstream>
#include <string>
#include <vector>

#include "shared/policy_parser.h"
#include "supervisor/cli/args.h"
#include "supervisor/cli/commands.h"
#include "supervisor/cli/exit_code.h"
#include "supervisor/io/nearest_word.h"

namespace pillbox::cli {

namespace {

const char* kHelp =
    "usage: pillbox policy check NAME|FILE... [--json]  validate policies; errors point at the line,\n"
    "                                                 unsafe settings (allow_unsafe = yes) are warned about\n"
    "       pillbox policy show NAME|FILE [--json]      print a policy with every default filled in\n"
    "\n"
    "Shipped policies: strict (in-process parsers), exec (arbitrary programs).\n"
    "The format is described in docs/policy-format.md. `pillbox policy VERB --help` describes one verb.\n";

const char* kCheckHelp =
    "usage: pillbox policy check NAME|FILE... [--json]\n"
    "\n"
    "Validates each policy: a shipped one by NAME, or a FILE (a path with '/' or ending in .policy).\n"
    "Errors point at the file and line; settings that switch confinement off (allowed by\n"
    "allow_unsafe = yes) are warned about on stderr.\n"
    "\n"
    "options:\n"
    "  --json   one JSON object on stdout: {\"policies\": [{\"argument\", \"ok\", \"name\",\n"
    "           \"syscalls_allowed\", \"default_action\", \"unsafe\": [TEXT...], \"error\"}...]}\n"
    "           (\"error\" only when not ok; \"name\" and the rest only when ok)\n"
    "\n"
    "exit codes: 0 every policy is valid, 2 some are not\n";

const char* kShowHelp =
    "usage: pillbox policy show NAME|FILE [--json]\n"
    "\n"
    "Prints a policy with every default filled in, in the policy file format.\n"
    "\n"
    "options:\n"
    "  --json   one JSON object on stdout: a member per section (\"policy\", \"limits\",\n"
    "           \"isolation\", \"seccomp\"), each an object of its keys with the values as the file\n"
    "           format writes them (strings); \"writable\" is an array of paths and \"allow\" an\n"
    "           array of syscall names\n"
    "\n"
    "exit codes: 0 shown, 2 no such policy or an invalid one\n";

int usage(const std::string& verb, const std::string& message) {
  return command_error(verb.empty() ? "policy" : "policy " + verb, message, kExitUsage);
}

std::string dump(const nlohmann::json& j) { return j.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace); }

int check(const std::vector<std::string>& names, bool json) {
  if (names.empty()) return usage("check", "give at least one policy name or file");
  nlohmann::json report = nlohmann::json::array();
  int rc = kExitOk;
  for (const std::string& arg : names) {
    auto policy = resolve_policy(arg);
    if (!policy) {
      std::fprintf(stderr, "%s\n", policy.error().c_str());
      report.push_back({{"argument", arg}, {"ok", false}, {"error", policy.error()}});
      rc = kExitUsage;
      continue;
    }
    const std::vector<std::string> unsafe = unsafe_settings(*policy);
    const std::string action(to_string(policy->seccomp.default_action));
    report.push_back({{"argument", arg},
                      {"ok", true},
                      {"name", policy->name},
                      {"syscalls_allowed", policy->seccomp.allow.size()},
                      {"default_action", action},
                      {"unsafe", unsafe}});
    if (!json) {
      std::printf("%s: ok (policy '%s', %zu syscalls allowed, default action %s)\n", arg.c_str(), policy->name.c_str(),
                  policy->seccomp.allow.size(), action.c_str());
    }
    for (const std::string& u : unsafe) {
      std::fprintf(stderr, "%s: warning: unsafe (allowed by allow_unsafe = yes): %s\n", arg.c_str(), u.c_str());
    }
  }
  if (json) std::printf("%s\n", dump({{"policies", report}}).c_str());
  return rc;
}

// The policy file format (format_policy's "[section]" and "key = value"
// lines) as JSON: the same names, one reader of the format less to keep.
nlohmann::json policy_json(const std::string& text) {
  nlohmann::json j = nlohmann::json::object();
  std::istringstream lines(text);
  std::string section;
  for (std::string line; std::getline(lines, line);) {
    if (line.empty()) continue;
    if (line.front() == '[' && line.back() == ']') {
      section = line.substr(1, line.size() - 2);
      j[section] = nlohmann::json::object();
      continue;
    }
    const auto eq = line.find(" = ");
    if (eq == std::string::npos) continue;
    const std::string key = line.substr(0, eq);
    const std::string value = line.substr(eq + 3);
    nlohmann::json& slot = j[section][key];
    if (key == "allow") {
      std::istringstream names(value);
      for (std::string name; names >> name;) slot.push_back(name);
    } else if (key == "writable" || key == "share") {
      slot.push_back(value);
    } else {
      slot = value;
    }
  }
  if (j.contains("seccomp") && !j["seccomp"].contains("allow")) j["seccomp"]["allow"] = nlohmann::json::array();
  return j;
}

int show(const std::vector<std::string>& names, bool json) {
  if (names.size() != 1) return usage("show", "give one policy name or file");
  auto policy = resolve_policy(names[0]);
  if (!policy) {
    std::fprintf(stderr, "%s\n", policy.error().c_str());
    return kExitUsage;
  }
  const std::string text = format_policy(*policy);
  if (json) {
    std::printf("%s\n", dump(policy_json(text)).c_str());
  } else {
    std::fputs(text.c_str(), stdout);
  }
  return kExitOk;
}

}  // namespace

int policy_command(int argc, char** argv) {
  if (argc < 3 || std::string(argv[2]) == "--help" || std::string(argv[2]) == "-h" || std::string(argv[2]) == "help") {
    std::fputs(kHelp, argc < 3 ? stderr : stdout);
    return argc < 3 ? kExitUsage : kExitOk;
  }
  const std::string verb = argv[2];
  if (verb != "check" && verb != "show") {
    const auto near = nearest_word(verb, {"check", "show"});
    return usage("", "unknown verb '" + verb + "'" + (near ? "; did you mean '" + *near + "'?" : "") +
                         " (check, show; see: pillbox policy --help)");
  }
  int exit_code = kExitOk;
  const char* help = verb == "check" ? kCheckHelp : kShowHelp;
  auto args = parse_command(argc, argv, 3, {{"json", false}}, "policy " + verb, help, exit_code);
  if (!args) return exit_code;
  // After "--", names are files even when they look like options (-x.policy).
  std::vector<std::string> names = args->positional();
  names.insert(names.end(), args->after_dashdash().begin(), args->after_dashdash().end());
  return verb == "check" ? check(names, args->flag("json")) : show(names, args->flag("json"));
}

}  // namespace pillbox::cli
