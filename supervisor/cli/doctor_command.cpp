// pillbox doctor [--policy NAME|FILE]... [--amqp URL --queue NAME [--max-attempts N] [--canary-wait D]] [--json]
#include <cstdio>
#include <optional>
#include <string>
#include <nlohmann/json.hpp>

#include "supervisor/broker/amqp_doctor.h"
#include "supervisor/broker/amqp_topology.h"
#include "supervisor/cli/args.h"
#include "supervisor/cli/commands.h"
#include "supervisor/cli/exit_code.h"
#include "supervisor/cli/fleet_key_option.h"
#include "supervisor/exec/install_paths.h"
#include "supervisor/flow/retry_policy.h"
#include "supervisor/ops/doctor.h"

namespace pillbox::cli {

namespace {

const char* kHelp =
    "usage: pillbox doctor [--policy NAME|FILE]... [--json]\n"
    "       pillbox doctor --amqp URL --queue NAME [--max-attempts N] [--canary-wait D] [--json]\n\n"
    "Says where pillbox found its helpers (the sandbox binary, the crash library, the pdf-text\n"
    "module), checks what this host allows (seccomp, namespaces, cgroups, privilege drop) by\n"
    "trying each for real, runs one task end to end, and says what pillbox falls back to where a\n"
    "feature is missing. The shipped policies and each --policy are checked too: a policy\n"
    "that switches confinement off (allow_unsafe = yes) is a NO line.\n\n"
    "With --amqp URL --queue NAME, a RabbitMQ fleet too: the broker reached; the dead-letter\n"
    "route proven with a canary, expired into NAME.dlx, that must arrive in NAME.dlq within\n"
    "--canary-wait (default 10s; it stays there, marked as doctor's); and NAME\n"
    "as workers with --max-attempts N (default 3) declare it, never created here.\n"
    "Exit code 0 when tasks can run here (and the fleet's checks pass), 3 when not.\n";

int fail_usage(const std::string& message) { return command_error("doctor", message, kExitUsage); }

}  // namespace

int doctor_command(int argc, char** argv) {
  int exit_code = kExitOk;
  auto args = parse_command(argc, argv, 2,
                            {{"json", false},
                             {"help", false},
                             {"policy", true, true},
                             {"amqp"},
                             {"queue"},
                             {"max-attempts"},
                             {"canary-wait"}},
                            "doctor", kHelp, exit_code);
  if (!args) return exit_code;
  std::optional<broker::AmqpDoctorSettings> fleet;
  if (args->value("amqp") || args->value("queue")) {
    auto target = read_amqp_target(*args);
    if (!target) return fail_usage(target.error());
    broker::AmqpDoctorSettings s;
    s.address = target->address;
    s.queue = target->queue;
    RetrySettings retry;  // the worker's default --max-attempts
    if (auto ok = read_whole_number(*args, "max-attempts", 1, 100, retry.max_attempts); !ok) return fail_usage(ok.message());
    s.delivery_limit = broker::worker_delivery_limit(retry.max_attempts);
    if (auto ok = read_duration(*args, "canary-wait", 100, 600'000, s.canary_wait); !ok) return fail_usage(ok.message());
    fleet = std::move(s);
  } else {
    for (const char* only : {"max-attempts", "canary-wait"}) {
      if (args->value(only)) return fail_usage(std::string("--") + only + " goes with --amqp URL --queue NAME");
    }
  }
  DoctorReport report = run_doctor(find_sandbox_binary(), args->values("policy"));
  bool fleet_ok = true;
  if (fleet) {
    for (DoctorCheck& c : broker::check_amqp_fleet(*fleet)) {
      fleet_ok = fleet_ok && c.ok;
      report.checks.push_back(std::move(c));
    }
  }
  if (args->flag("json")) {
    nlohmann::json j;
    j["usable"] = report.usable;
    if (fleet) j["fleet_ok"] = fleet_ok;
    for (const auto& c : report.checks) {
      j["checks"].push_back({{"name", c.name}, {"ok", c.ok}, {"detail", c.detail}, {"fallback", c.fallback}});
    }
    std::puts(j.dump().c_str());  // one line, as every verb's --json
  } else {
    for (const auto& c : report.checks) {
      std::printf("%-4s %-40s %s\n", c.ok ? "ok" : "NO", c.name.c_str(), c.detail.c_str());
      if (!c.ok && !c.fallback.empty()) std::printf("     %-40s -> %s\n", "", c.fallback.c_str());
    }
    std::printf("\n%s\n", report.usable ? "pillbox can run tasks on this host." : "pillbox cannot run tasks on this host (see above).");
    if (fleet) {
      std::printf("%s\n", fleet_ok ? ("the RabbitMQ fleet of " + fleet->queue + " is ready.").c_str()
                                   : ("the RabbitMQ fleet of " + fleet->queue + " is not ready (see above).").c_str());
    }
  }
  return report.usable && fleet_ok ? kExitOk : kExitSetup;
}

}  // namespace pillbox::cli
