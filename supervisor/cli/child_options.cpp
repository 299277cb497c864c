#include "supervisor/cli/child_options.h"

#include <limits>
#include <string>
#include <string_view>
#include <utility>

#include "shared/policy_parser.h"
#include "supervisor/exec/install_paths.h"
#include "supervisor/io/time_args.h"

namespace pillbox::cli {

const std::vector<OptionSpec> kChildOptions = {{"handler"}, {"arg", true, true}, {"policy"}, {"timeout"}, {"cpu"},
                                               {"memory"},  {"max-output"},     {"mode"},   {"writable", true, true},
                                               {"share", true, true}};

Expected<std::optional<HandlerChoice>> read_handler_choice(const Args& args) {
  HandlerChoice choice;
  const auto handler = args.value("handler");
  if (args.has_dashdash()) {
    if (handler && *handler != "exec") return Error{"give either --handler or a command after --, not both"};
    if (args.after_dashdash().empty()) return Error{"no command after --"};
    choice.handler = "exec";
    choice.exec_argv = args.after_dashdash();
  } else if (handler) {
    choice.handler = *handler;
  } else {
    if (!args.values("arg").empty()) return Error{"--arg goes with --handler"};
    return std::optional<HandlerChoice>();
  }
  for (const auto& kv : args.values("arg")) {
    const auto eq = kv.find('=');
    if (eq == std::string::npos || eq == 0) return Error{"--arg expects KEY=VALUE, got '" + kv + "'"};
    if (choice.handler == "exec") return Error{"--arg is for handlers; an exec command takes its arguments after --"};
    if (!choice.args.emplace(kv.substr(0, eq), kv.substr(eq + 1)).second) {
      return Error{"--arg " + kv.substr(0, eq) + " given twice"};
    }
  }
  return std::optional<HandlerChoice>(std::move(choice));
}

Expected<std::optional<Policy>> read_policy_override(const Args& args) {
  const auto name = args.value("policy");
  if (!name) return std::optional<Policy>();
  auto policy = resolve_policy(*name);
  if (!policy) return Error{policy.error()};
  return std::optional<Policy>(std::move(*policy));
}

const std::vector<OptionSpec> kRecordAllowanceOptions = {{"timeout"}, {"cpu"}, {"memory"}, {"max-output"},
                                                         {"writable", true, true}, {"share", true, true}};

Expected<RecordAllowance> read_record_allowance(const Args& args) {
  // The flags read as run reads them, into a policy with no limits: what is
  // still 0 was not given.
  Policy scratch;
  scratch.limits = Limits{0, 0, 0, 0, 0, 0, 0, 0};
  if (auto s = apply_limit_overrides(args, scratch); !s) return Error{s.message()};
  RecordAllowance allowed;
  allowed.wall_ms = scratch.limits.wall_ms;
  allowed.cpu_ms = scratch.limits.cpu_ms;
  allowed.memory_bytes = scratch.limits.memory_bytes;
  allowed.output_bytes = scratch.limits.output_bytes;
  allowed.writable = scratch.isolation.writable;
  allowed.shared = scratch.isolation.shared;
  allowed.handler = args.value("handler").value_or("");
  return allowed;
}

Status read_record_policy_options(const Args& args, std::optional<Policy>& policy, RecordAllowance& allowed) {
  auto given = read_policy_override(args);
  if (!given) return Status::error(given.error());
  policy = std::move(*given);
  auto flags = read_record_allowance(args);
  if (!flags) return Status::error(flags.error());
  allowed = std::move(*flags);
  if (policy) return apply_limit_overrides(args, *policy);
  return Status::ok();
}

Status apply_limit_overrides(const Args& args, Policy& policy) {
  for (const auto& [flag, key] : {std::pair{"timeout", "wall"}, {"cpu", "cpu"}, {"memory", "memory"}, {"max-output", "output"}}) {
    auto v = args.value(flag);
    if (!v) continue;
    // Durations on the command line may have a fraction (0.5s, 1.5m, as GNU
    // timeout takes them); the policy's own ranges then apply to the
    // milliseconds they come to.
    if (key == std::string_view("wall") || key == std::string_view("cpu")) {
      auto ms = parse_duration_arg(*v, "--" + std::string(flag), 0, std::numeric_limits<std::uint64_t>::max());
      if (!ms) return Status::error(ms.error());
      v = std::to_string(*ms) + "ms";
    }
    if (auto s = set_limit(policy.limits, key, *v); !s) return Status::error("--" + std::string(flag) + ": " + s.message());
  }
  for (const auto& path : args.values("writable")) {
    if (auto s = add_writable(policy.isolation, path); !s) return Status::error("--writable: " + s.message());
  }
  for (const auto& path : args.values("share")) {
    if (auto s = add_shared(policy.isolation, path); !s) return Status::error("--share: " + s.message());
  }
  return Status::ok();
}

Expected<ChildConfig> read_child_config(const Args& args) {
  auto choice = read_handler_choice(args);
  if (!choice) return Error{choice.error()};
  if (!*choice) {
    return Error{"--handler is required (echo, regex, pdf-text, inflate, plugin:PATH.so), or give a command after --"};
  }
  auto policy = resolve_policy(args.value("policy").value_or((*choice)->handler == "exec" ? "exec" : "strict"));
  if (!policy) return Error{policy.error()};
  if (auto s = apply_limit_overrides(args, *policy); !s) return Error{s.message()};
  return make_child_config(**choice, std::move(*policy));
}

Status read_launch_mode(const Args& args, LaunchMode& mode) {
  const std::string text = args.value("mode").value_or("zygote");
  if (text == "zygote") mode = LaunchMode::kZygote;
  else if (text == "spawn") mode = LaunchMode::kSpawn;
  else return Status::error("--mode expects zygote or spawn");
  return Status::ok();
}

Expected<std::optional<std::uint64_t>> read_size(const Args& args, const std::string& name) {
  const auto v = args.value(name);
  if (!v) return std::optional<std::uint64_t>{};
  // Through the policy's parser for its output limit: one grammar and one
  // range check for every size on the command line.
  Limits scratch;
  if (auto s = set_limit(scratch, "output", *v); !s) return Error{"--" + name + ": " + s.message()};
  return std::optional<std::uint64_t>(scratch.output_bytes);
}

Expected<RunSettings> read_run_settings(const Args& args) {
  RunSettings settings;
  auto config = read_child_config(args);
  if (!config) return Error{config.error()};
  settings.config = std::move(*config);
  if (auto s = read_jobs(args, settings.jobs); !s) return Error{s.message()};
  if (auto s = read_launch_mode(args, settings.mode); !s) return Error{s.message()};
  settings.sandbox_binary = find_sandbox_binary();
  return settings;
}

}  // namespace pillbox::cli
