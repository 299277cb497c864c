// pillbox run [options] INPUT... [-- CMD ARGS...]
#include <pwd.h>
#include <sys/stat.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <filesystem>
#include <set>
#include <string>
#include <thread>

#include "shared/control.h"
#include "shared/policy_parser.h"
#include "supervisor/cli/args.h"
#include "supervisor/cli/commands.h"
#include "supervisor/install_paths.h"
#include "supervisor/run.h"
#include "supervisor/run_output.h"

namespace pillbox::cli {
namespace {

const char* kHelp =
    "usage: pillbox run [options] INPUT...\n"
    "       pillbox run [options] INPUT... -- CMD ARGS...   (exec mode: payload on stdin, or as a file where {} appears)\n"
    "\n"
    "Runs every input in its own confined child process and reports how each one ended.\n"
    "INPUT is a file, a directory (read recursively), or - for JSON lines on stdin:\n"
    "  {\"key\": \"id-1\", \"payload\": \"text\"}   or   {\"key\": \"id-2\", \"payload_b64\": \"...\"}\n"
    "\n"
    "options:\n"
    "  --handler NAME      echo | regex | pdf-text | inflate | plugin:PATH.so (not with a command)\n"
    "  --arg K=V           handler argument, repeatable (regex: pattern=, mode=search|match, icase=yes|no)\n"
    "  --policy NAME|FILE  confinement policy (default: strict for handlers, exec for commands)\n"
    "  --jobs N            children running at once (default: number of cores)\n"
    "  --timeout DURATION  wall-clock limit per task, e.g. 500ms, 10s (overrides the policy)\n"
    "  --cpu DURATION      CPU-time limit per task (overrides the policy)\n"
    "  --memory SIZE       memory limit per task, e.g. 256M (overrides the policy)\n"
    "  --max-output SIZE   largest result accepted (overrides the policy)\n"
    "  --json              one JSON object per task on stdout\n"
    "  --out DIR           write each successful result to a file in DIR (named after the key)\n"
    "  --mode MODE         zygote (default: fork per task from a prepared process) | spawn (fork+exec per task)\n"
    "  --quiet             no per-task lines without --json, no summary\n"
    "\n"
    "exit codes: 0 all tasks ok, 1 some tasks failed, 2 usage or input error, 3 setup error\n";

const std::vector<OptionSpec> kOptions = {
    {"handler"}, {"arg", true, true}, {"policy"}, {"jobs"}, {"timeout"}, {"cpu"}, {"memory"},
    {"max-output"}, {"json", false}, {"out"}, {"mode"}, {"quiet", false}, {"help", false},
};

int usage_error(const std::string& message) {
  std::fprintf(stderr, "pillbox run: %s\n", message.c_str());
  return kExitUsage;
}

// argv[0] of an exec command, resolved like a shell would, made absolute.
Expected<std::string> resolve_command(const std::string& name) {
  namespace fs = std::filesystem;
  auto executable = [](const fs::path& p) {
    std::error_code ec;
    return fs::is_regular_file(p, ec) && ::access(p.c_str(), X_OK) == 0;
  };
  if (name.find('/') != std::string::npos) {
    std::error_code ec;
    const fs::path p = fs::canonical(name, ec);
    if (ec || !executable(p)) return Error{"command '" + name + "' is not an executable file"};
    return p.string();
  }
  const char* path = std::getenv("PATH");
  std::string dirs = path ? path : "/usr/local/bin:/usr/bin:/bin";
  std::size_t start = 0;
  while (start <= dirs.size()) {
    const std::size_t end = dirs.find(':', start);
    const std::string dir = dirs.substr(start, end == std::string::npos ? std::string::npos : end - start);
    const fs::path p = fs::path(dir.empty() ? "." : dir) / name;
    if (executable(p)) {
      std::error_code ec;
      const fs::path c = fs::canonical(p, ec);
      return (ec ? p : c).string();
    }
    if (end == std::string::npos) break;
    start = end + 1;
  }
  return Error{"command '" + name + "' not found in PATH"};
}

Status resolve_user(const std::string& user, ChildConfig& config) {
  char* end = nullptr;
  const unsigned long numeric = std::strtoul(user.c_str(), &end, 10);
  if (!user.empty() && *end == '\0') {
    config.sandbox_uid = static_cast<std::uint32_t>(numeric);
    config.sandbox_gid = static_cast<std::uint32_t>(numeric);
    return Status::ok();
  }
  const passwd* pw = ::getpwnam(user.c_str());
  if (pw == nullptr) return Status::error("policy user '" + user + "' does not exist on this host");
  config.sandbox_uid = pw->pw_uid;
  config.sandbox_gid = pw->pw_gid;
  return Status::ok();
}

// A file name for a task's result: the key with unsafe characters replaced,
// unique within the directory.
std::string output_name(const std::string& key, std::set<std::string>& used) {
  std::string base;
  for (char c : key) base += (std::isalnum(static_cast<unsigned char>(c)) || c == '.' || c == '-' || c == '_') ? c : '_';
  if (base.size() > 200) base.resize(200);
  if (base.empty() || base == "." || base == "..") base = "task";
  std::string name = base + ".out";
  for (int n = 2; used.count(name); ++n) name = base + "." + std::to_string(n) + ".out";
  used.insert(name);
  return name;
}

class CliSink final : public OutcomeSink {
 public:
  CliSink(bool json, bool quiet, std::string out_dir) : json_(json), quiet_(quiet), out_dir_(std::move(out_dir)) {}

  void on_outcome(const Task& task, const Outcome& outcome) override {
    summary_.add(task, outcome);
    std::string file;
    if (!out_dir_.empty() && outcome.kind == Kind::kOk) {
      file = out_dir_ + "/" + output_name(task.key, used_names_);
      std::FILE* f = std::fopen(file.c_str(), "wbe");
      if (f == nullptr || std::fwrite(outcome.output.data(), 1, outcome.output.size(), f) != outcome.output.size()) {
        std::fprintf(stderr, "pillbox run: cannot write %s\n", file.c_str());
        write_errors_ = true;
      }
      if (f) std::fclose(f);
    }
    if (json_) {
      const std::string line = outcome_json(task, outcome, file.empty() ? nullptr : &file);
      std::fwrite(line.data(), 1, line.size(), stdout);
      std::fputc('\n', stdout);
      std::fflush(stdout);
    } else if (!quiet_) {
      std::printf("%s\n", outcome_line(task, outcome).c_str());
      std::fflush(stdout);
    }
  }

  void on_input_error(const std::string& message) override { std::fprintf(stderr, "pillbox run: %s\n", message.c_str()); }

  const RunSummary& summary() const { return summary_; }
  bool write_errors() const { return write_errors_; }

 private:
  bool json_;
  bool quiet_;
  std::string out_dir_;
  std::set<std::string> used_names_;
  RunSummary summary_;
  bool write_errors_ = false;
};

}  // namespace

int run_command(int argc, char** argv) {
  auto args = Args::parse(argc, argv, 2, kOptions, "run");
  if (!args) return usage_error(args.error());
  if (args->flag("help")) {
    std::fputs(kHelp, stdout);
    return kExitOk;
  }
  RunSettings settings;
  ChildConfig& config = settings.config;

  // What runs: a handler, or a command after "--".
  const auto handler = args->value("handler");
  if (args->has_dashdash()) {
    if (handler && *handler != "exec") return usage_error("give either --handler or a command after --, not both");
    if (args->after_dashdash().empty()) return usage_error("no command after --");
    config.handler = "exec";
    config.exec_argv = args->after_dashdash();
    auto path = resolve_command(config.exec_argv[0]);
    if (!path) return usage_error(path.error());
    config.exec_argv[0] = *path;
    for (const auto& a : config.exec_argv) {
      if (a.find("{}") != std::string::npos) config.exec_payload_as_file = true;
    }
    config.crash_lib = find_crash_library();
  } else if (!handler) {
    return usage_error("--handler is required (echo, regex, pdf-text, inflate, plugin:PATH.so), or give a command after --");
  } else {
    config.handler = *handler;
  }
  for (const auto& kv : args->values("arg")) {
    const auto eq = kv.find('=');
    if (eq == std::string::npos || eq == 0) return usage_error("--arg expects KEY=VALUE, got '" + kv + "'");
    if (config.exec_mode()) return usage_error("--arg is for handlers; an exec command takes its arguments after --");
    if (!config.args.emplace(kv.substr(0, eq), kv.substr(eq + 1)).second) {
      return usage_error("--arg " + kv.substr(0, eq) + " given twice");
    }
  }

  // Under which policy, with the command line's overrides.
  auto policy = resolve_policy(args->value("policy").value_or(config.exec_mode() ? "exec" : "strict"));
  if (!policy) return usage_error(policy.error());
  config.policy = std::move(*policy);
  for (const auto& [flag, key] : {std::pair{"timeout", "wall"}, {"cpu", "cpu"}, {"memory", "memory"}, {"max-output", "output"}}) {
    if (auto v = args->value(flag)) {
      if (auto s = set_limit(config.policy.limits, key, *v); !s) return usage_error("--" + std::string(flag) + ": " + s.message());
    }
  }
  if (::geteuid() == 0) {
    config.drop_privileges = true;
    if (auto s = resolve_user(config.policy.isolation.user, config); !s) return usage_error(s.message());
  }

  // How.
  const unsigned cores = std::max(1u, std::thread::hardware_concurrency());
  settings.jobs = cores;
  if (auto jobs = args->value("jobs")) {
    char* end = nullptr;
    const long n = std::strtol(jobs->c_str(), &end, 10);
    if (jobs->empty() || *end != '\0' || n < 1 || n > 1024) return usage_error("--jobs expects a number from 1 to 1024");
    settings.jobs = static_cast<std::size_t>(n);
  }
  const std::string mode = args->value("mode").value_or("zygote");
  if (mode == "zygote") settings.mode = LaunchMode::kZygote;
  else if (mode == "spawn") settings.mode = LaunchMode::kSpawn;
  else return usage_error("--mode expects zygote or spawn");
  settings.sandbox_binary = find_sandbox_binary();

  std::string out_dir = args->value("out").value_or("");
  if (!out_dir.empty()) {
    std::error_code ec;
    std::filesystem::create_directories(out_dir, ec);
    if (ec || ::access(out_dir.c_str(), W_OK) != 0) return usage_error("cannot write to --out directory '" + out_dir + "'");
  }

  // What from.
  if (args->positional().empty()) return usage_error("no inputs (give files, directories, or - for JSON lines on stdin)");
  auto source = open_inputs(args->positional());
  if (!source) return usage_error(source.error());

  CliSink sink(args->flag("json"), args->flag("quiet"), out_dir);
  const auto started = std::chrono::steady_clock::now();
  auto report = run_tasks(settings, **source, sink);
  if (!report) {
    const std::string& message = report.error();
    if (message.rfind(kConfigErrorPrefix, 0) == 0) return usage_error(message);
    std::fprintf(stderr, "pillbox run: setup error: %s\n", message.c_str());
    return kExitSetup;
  }
  const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - started).count();
  if (!args->flag("quiet")) std::fputs(sink.summary().render(seconds, *report).c_str(), stderr);
  if (report->input_errors > 0 || sink.write_errors()) return kExitUsage;
  return sink.summary().failed() > 0 ? kExitFailures : kExitOk;
}

}  // namespace pillbox::cli
