#pragma once
// The command line of every verb, one grammar (on CLI11): --name VALUE,
// --name=VALUE, -n VALUE, flags (also bundled: -qn), positionals, and
// everything after "--" kept apart (the exec command). --help and -h are
// taken by every verb; a --help anywhere (before "--") wins over every other
// argument and every error, so a verb shows its help and does nothing else.
// The common options have the same short names in every verb that takes
// them: -j --jobs, -q --quiet, -n --dry-run, -o --out/--output, -h --help.
#include <chrono>
#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "shared/status.h"

namespace pillbox::cli {

struct OptionSpec {
  std::string name;       // without the leading "--"
  bool takes_value = true;
  bool repeatable = false;
  char short_name = 0;    // e.g. 'o' for -o (takes the next argument as its value); the
                          // common options get theirs without it (see above)
  // Its value may hold a secret (a hook command with a token): once read, it
  // is overwritten in argv. The kernel shows a process's argv to every user
  // (/proc/PID/cmdline), and a spawn-mode task, which has no PID namespace,
  // sees the supervisor's.
  bool secret = false;
};

class Args {
 public:
  static Expected<Args> parse(int argc, char** argv, int first, const std::vector<OptionSpec>& specs,
                              const std::string& command);

  std::optional<std::string> value(const std::string& name) const;
  std::vector<std::string> values(const std::string& name) const;
  bool flag(const std::string& name) const { return values_.count(name) > 0; }
  const std::vector<std::string>& positional() const { return positional_; }
  const std::vector<std::string>& after_dashdash() const { return after_dashdash_; }
  bool has_dashdash() const { return has_dashdash_; }

 private:
  std::map<std::string, std::vector<std::string>> values_;
  std::vector<std::string> positional_;
  std::vector<std::string> after_dashdash_;
  bool has_dashdash_ = false;
};

// Args::parse of argv[first...] for `pillbox COMMAND`, then --help: `help`
// on stdout (exit 0), or arguments that do not parse, a usage error (exit
// 2). nullopt in both cases, with `exit_code` set. `named_as`: the command
// as its errors name it, when not COMMAND (every quarantine verb's are
// "pillbox quarantine: ...").
std::optional<Args> parse_command(int argc, char** argv, int first, const std::vector<OptionSpec>& specs,
                                  const std::string& command, const char* help, int& exit_code,
                                  const std::string& named_as = "");

// A whole number in [min, max] for --NAME; the error names the option and the range.
Expected<long> parse_whole_number(const std::string& name, const std::string& text, long min, long max);

// Permission bits in octal for --NAME ("0644", "600"), at most 0777: no
// setuid, setgid or sticky bit. The error names the option.
Expected<unsigned> parse_file_mode(const std::string& name, const std::string& text);

// --jobs N (1 to 1024), or the number of cores when it is not given, into `jobs`.
Status read_jobs(const Args& args, std::size_t& jobs);

// --NAME N, a whole number in [min, max], into `field` when it is given;
// `field` keeps its default otherwise.
template <class Field>
Status read_whole_number(const Args& args, const std::string& name, long min, long max, Field& field) {
  const auto text = args.value(name);
  if (!text) return Status::ok();
  auto n = parse_whole_number(name, *text, min, max);
  if (!n) return Status::error(n.error());
  field = static_cast<Field>(*n);
  return Status::ok();
}

// --NAME DURATION ("500ms", "10s", "5m") in [min_ms, max_ms], into `field`
// when it is given; `field` keeps its default otherwise.
Status read_duration(const Args& args, const std::string& name, std::uint64_t min_ms, std::uint64_t max_ms,
                     std::chrono::milliseconds& field);

}  // namespace pillbox::cli
