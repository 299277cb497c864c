#include "supervisor/exec/child_setup.h"

#include <pwd.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <nlohmann/json.hpp>

#include "shared/policy_parser.h"
#include "shared/task_input.h"
#include "supervisor/exec/access_check.h"
#include "supervisor/exec/install_paths.h"
#include "supervisor/exec/record_policy.h"
#include "supervisor/exec/host_view.h"
#include "supervisor/io/nearest_word.h"

namespace pillbox {
namespace {

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

// An argument naming an existing path relative to `base`, made absolute: a
// task runs in a private working directory, and a record must reproduce
// from anywhere. Anything else stays as typed.
std::string absolute_if_existing(const std::string& arg, const std::string& base) {
  if (arg.empty() || arg.starts_with('/') || arg.starts_with('-')) return arg;
  const std::filesystem::path full = std::filesystem::path(base) / arg;
  std::error_code ec;
  if (!std::filesystem::exists(full, ec)) return arg;
  return full.lexically_normal().string();
}

// Interpreters whose first argument that is not an option is the program
// they run: by the base name of the resolved command (python3 is
// python3.11 once resolved).
bool is_interpreter(const std::string& command) {
  const std::string name = std::filesystem::path(command).filename().string();
  for (const char* versioned : {"python", "pypy", "ruby", "perl", "php", "lua", "node"}) {
    const std::string_view rest = std::string_view(name).substr(std::min(name.size(), std::strlen(versioned)));
    if (name.starts_with(versioned) && rest.find_first_not_of("0123456789.") == std::string_view::npos) return true;
  }
  for (const char* plain : {"nodejs", "sh", "bash", "dash", "zsh", "ksh", "Rscript", "tclsh"}) {
    if (name == plain) return true;
  }
  return false;
}

// The extensions of the programs those interpreters run: an argument
// without one ("-W ignore", a module after -m) is not taken for a script.
bool has_script_extension(const std::string& arg) {
  const std::string ext = std::filesystem::path(arg).extension().string();
  for (const char* e : {".py", ".rb", ".pl", ".pm", ".php", ".lua", ".js", ".mjs", ".cjs", ".sh", ".bash", ".R", ".r",
                        ".tcl"}) {
    if (ext == e) return true;
  }
  return false;
}

// `python3 parse_record.py {}` beside parse_records.py would fail every
// task after the run had started (issue 26, point 4): a missing script is
// refused first, with the nearest name. Only the first non-option argument
// that looks like a script; -c, -e, -m and {} are left alone.
Status check_interpreter_script(const std::vector<std::string>& argv, const std::string& base) {
  namespace fs = std::filesystem;
  if (argv.empty() || !is_interpreter(argv[0])) return Status::ok();
  for (std::size_t i = 1; i < argv.size(); ++i) {
    const std::string& a = argv[i];
    if (a == "-c" || a == "-e" || a == "-m" || a == "--eval" || a == "-" || has_replacement_string(a)) return Status::ok();
    if (a.starts_with("-")) continue;
    if (!has_script_extension(a)) return Status::ok();
    const fs::path path = a.starts_with('/') ? fs::path(a) : fs::path(base) / a;
    std::error_code ec;
    if (fs::exists(path, ec) || ec.value() == EACCES) return Status::ok();
    const fs::path dir = path.parent_path();
    std::vector<std::string> names;
    for (const auto& entry : fs::directory_iterator(dir, ec)) {
      if (names.size() >= 10000) break;
      names.push_back(entry.path().filename().string());
    }
    const auto near = nearest_word(path.filename().string(), names);
    return Status::error("the script " + a + " does not exist" +
                         (a.starts_with('/') ? std::string() : " in " + base + ", where the command line is read") +
                         (near ? ": did you mean " +
                                     (a.starts_with('/') ? (dir / *near).string()
                                                         : (dir / *near).lexically_relative(base).string()) +
                                     "?"
                               : std::string(ec ? "" : ": " + dir.lexically_normal().string() + " holds no file of a similar name")));
  }
  return Status::ok();
}

// Where an exec command line's relative paths point and where it runs: the
// directory a record says, which must still be one, or this process's.
Expected<std::string> exec_working_dir(const std::string& given) {
  namespace fs = std::filesystem;
  if (given.empty()) {
    std::error_code ec;
    const fs::path cwd = fs::current_path(ec);
    if (ec) {
      return Error{"cannot tell the current directory (" + ec.message() +
                   "): was it removed? start pillbox from a directory that exists"};
    }
    return cwd.string();
  }
  // A record from another store or from Redis is only text: a relative or
  // truncated path would silently mean somewhere else.
  if (given.front() != '/' || given.find('\0') != std::string::npos) {
    return Error{"its working directory '" + given + "' is not an absolute path"};
  }
  std::error_code ec;
  const fs::file_status st = fs::status(given, ec);
  if (ec || !fs::is_directory(st)) {
    return Error{"its working directory " + given + " " +
                 (ec ? "is gone (" + ec.message() + ")" : std::string("is not a directory")) +
                 ": the command ran there, and its relative paths name files there; restore it, or reproduce "
                 "on the host the record came from"};
  }
  return given;
}

// What the command line names under the directories a task gets privately.
std::vector<std::string> names_under_private_dirs(const ChildConfig& config) {
  std::vector<std::string> named;
  if (config.exec_mode()) {
    for (const AccessNeed& n : command_access_needs(config.exec_argv, kExecTaskPath)) named.push_back(n.path);
    if (!config.crash_lib.empty()) named.push_back(config.crash_lib);
    // Paths inside an argument, as in a shell's command string
    // (sh -c "exec /tmp/build/tool"): each absolute word that exists.
    for (std::size_t i = 1; i < config.exec_argv.size(); ++i) {
      for (const std::string& word : absolute_words(config.exec_argv[i])) {
        std::error_code ec;
        if (std::filesystem::exists(word, ec)) named.push_back(word);
      }
    }
  } else if (config.handler.starts_with("plugin:")) {
    named.push_back(config.handler.substr(7));
  }
  std::vector<std::string> out;
  for (const std::string& path : named) {
    std::error_code ec;
    const std::string full = std::filesystem::absolute(path, ec).lexically_normal().string();
    for (const char* dir : kPrivateDirs) {
      const std::string prefix = std::string(dir) + "/";
      if (full.rfind(prefix, 0) == 0 && std::find(out.begin(), out.end(), full) == out.end()) out.push_back(full);
    }
  }
  return out;
}

}  // namespace

Expected<std::string> resolve_command(const std::string& name, const std::string& base) {
  namespace fs = std::filesystem;
  auto executable = [](const fs::path& p) {
    std::error_code ec;
    return fs::is_regular_file(p, ec) && ::access(p.c_str(), X_OK) == 0;
  };
  if (name.find('/') != std::string::npos) {
    std::error_code ec;
    const fs::path p = fs::canonical(fs::path(base) / name, ec);
    if (ec || !executable(p)) return Error{"command '" + name + "' is not an executable file"};
    return p.string();
  }
  const char* path = std::getenv("PATH");
  std::string dirs = path ? path : "/usr/local/bin:/usr/bin:/bin";
  std::size_t start = 0;
  while (start <= dirs.size()) {
    const std::size_t end = dirs.find(':', start);
    const std::string dir = dirs.substr(start, end == std::string::npos ? std::string::npos : end - start);
    const fs::path p = fs::path(base) / fs::path(dir.empty() ? "." : dir) / name;
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

Expected<ChildConfig> make_child_config(const HandlerChoice& choice, Policy policy) {
  ChildConfig config;
  config.handler = choice.handler;
  config.args = choice.args;
  config.policy = std::move(policy);
  if (config.exec_mode()) {
    if (choice.exec_argv.empty()) return Error{"no command to run"};
    if (!choice.args.empty()) return Error{"handler arguments are for handlers; an exec command takes its arguments after --"};
    auto dir = exec_working_dir(choice.working_dir);
    if (!dir) return Error{dir.error()};
    config.working_dir = *dir;
    config.exec_argv = choice.exec_argv;
    auto path = resolve_command(config.exec_argv[0], config.working_dir);
    if (!path) return Error{path.error()};
    config.exec_argv[0] = *path;
    if (auto s = check_interpreter_script(config.exec_argv, config.working_dir); !s) return Error::usage(s.message());
    for (std::size_t i = 1; i < config.exec_argv.size(); ++i) {
      std::string& a = config.exec_argv[i];
      if (names_payload_file(a)) config.exec_payload_as_file = true;
      if (!has_replacement_string(a)) a = absolute_if_existing(a, config.working_dir);
    }
    config.crash_lib = find_crash_library();
  } else if (choice.handler.empty()) {
    return Error{"no handler given"};
  }
  config.keep_visible = names_under_private_dirs(config);
  if (::geteuid() == 0) {
    config.drop_privileges = true;
    if (auto s = resolve_user(config.policy.isolation.user, config); !s) return Error{s.message()};
    // The parser refuses "root" and "0" without allow_unsafe; another name
    // for uid 0 is only known here, on the host that runs the children.
    if (config.sandbox_uid == 0 && !config.policy.allow_unsafe) {
      return Error{"policy user '" + config.policy.isolation.user +
                   "' is uid 0 on this host: tasks would run as root; choose an unprivileged user, or add "
                   "'allow_unsafe = yes' under [policy] if you mean it"};
    }
  }
  return config;
}

Expected<HandlerChoice> recorded_handler(const store::QuarantineEntry& e, const RecordAllowance& allowed) {
  if (!allowed.handler.empty() && allowed.handler != e.handler) {
    return Error::usage("--handler " + allowed.handler + " is not the record's handler (" + e.handler +
                        "): it only says a plugin record's handler again (to run the payload under another handler, "
                        "use quarantine replay --handler)");
  }
  if (e.handler.rfind("plugin:", 0) == 0 && e.handler != allowed.handler) {
    return Error::usage("the record's handler " + e.handler +
                        " is a plugin: code pillbox loads into its own processes, which a record never chooses; say "
                        "--handler " + e.handler + " to run it so");
  }
  HandlerChoice choice;
  choice.handler = e.handler;
  choice.working_dir = e.working_dir;
  if (e.handler == "exec") {
    auto argv = nlohmann::json::parse(e.exec_argv, nullptr, false);
    if (!argv.is_array() || argv.empty()) return Error{"the record's exec command is unreadable: " + e.exec_argv};
    for (const auto& a : argv) {
      if (!a.is_string()) return Error{"the record's exec command is unreadable: " + e.exec_argv};
      choice.exec_argv.push_back(a.get<std::string>());
    }
    return choice;
  }
  auto args = nlohmann::json::parse(e.handler_args, nullptr, false);
  if (!args.is_object()) return Error{"the record's handler arguments are unreadable: " + e.handler_args};
  for (const auto& [k, v] : args.items()) {
    if (!v.is_string()) return Error{"the record's handler argument '" + k + "' is not text"};
    choice.args[k] = v.get<std::string>();
  }
  return choice;
}

Expected<Policy> recorded_policy(const store::QuarantineEntry& e, const RecordAllowance& allowed) {
  return policy_for_record(e.policy, e.policy_identity, allowed);
}

bool replaces_handler(const store::QuarantineEntry& e, const std::optional<HandlerChoice>& given) {
  if (!given) return false;
  return !(given->handler == e.handler && given->args.empty() && e.handler.rfind("plugin:", 0) == 0);
}

Expected<HandlerChoice> handler_or_recorded(const store::QuarantineEntry& e, const std::optional<HandlerChoice>& given,
                                            const RecordAllowance& allowed) {
  if (replaces_handler(e, given)) return *given;
  RecordAllowance with_it = allowed;
  if (given) with_it.handler = given->handler;  // the record's plugin, said again
  return recorded_handler(e, with_it);
}

Expected<Policy> policy_or_recorded(const store::QuarantineEntry& e, const std::optional<Policy>& given,
                                    const RecordAllowance& allowed) {
  if (given) return *given;
  return recorded_policy(e, allowed);
}

Expected<ChildConfig> recorded_child_config(const store::QuarantineEntry& e, const std::optional<Policy>& given,
                                            const RecordAllowance& allowed) {
  auto handler = recorded_handler(e, allowed);
  if (!handler) return Error{handler.error(), handler.error_code()};
  auto policy = policy_or_recorded(e, given, allowed);
  if (!policy) return Error{policy.error(), policy.error_code()};
  auto config = make_child_config(*handler, std::move(*policy));
  if (!config) return Error{"it cannot run here: " + config.error()};
  return config;
}

}  // namespace pillbox
