#include "supervisor/cli/args.h"

#include <CLI/CLI.hpp>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <thread>

#include "supervisor/cli/commands.h"
#include "supervisor/cli/exit_code.h"
#include "supervisor/io/nearest_word.h"
#include "supervisor/io/time_args.h"

namespace pillbox::cli {
namespace {

// The short names every verb gives these options, when it takes them and has
// not given the letter to another option: one meaning per letter everywhere.
constexpr std::pair<const char*, char> kConventionalShortNames[] = {
    {"jobs", 'j'}, {"quiet", 'q'}, {"dry-run", 'n'}, {"out", 'o'}, {"output", 'o'}, {"help", 'h'},
};

// The verb's options with --help added (every verb takes it) and the
// conventional short names filled in.
std::vector<OptionSpec> complete_specs(std::vector<OptionSpec> specs) {
  const auto named = [&](const std::string& name) {
    return std::any_of(specs.begin(), specs.end(), [&](const OptionSpec& s) { return s.name == name; });
  };
  if (!named("help")) specs.push_back({"help", false});
  for (const auto& [name, letter] : kConventionalShortNames) {
    const char short_name = letter;  // clang 14 cannot capture a structured binding (C++20 allows it)
    const bool taken =
        std::any_of(specs.begin(), specs.end(), [&](const OptionSpec& s) { return s.short_name == short_name; });
    if (taken) continue;
    for (auto& s : specs) {
      if (s.name == name && s.short_name == 0) {
        s.short_name = short_name;
        break;
      }
    }
  }
  return specs;
}

const OptionSpec* find_long(const std::vector<OptionSpec>& specs, const std::string& name) {
  for (const auto& s : specs) {
    if (s.name == name) return &s;
  }
  return nullptr;
}

const OptionSpec* find_short(const std::vector<OptionSpec>& specs, char letter) {
  for (const auto& s : specs) {
    if (s.short_name == letter) return &s;
  }
  return nullptr;
}

// What a single letter means in other tools, for a verb that does not take
// it: `-n 3` is a count (head, xargs), `-t` a time limit, `-m` memory.
constexpr std::pair<char, const char*> kLetterMeanings[] = {
    {'n', "runs"}, {'n', "max-runs"}, {'n', "limit"}, {'t', "timeout"}, {'m', "memory"},
};

// The option a mistyped one most likely meant, or "" when none is close:
// a typo (--jsno: --json); a part of a longer name (--runs: --max-runs,
// --status-of: --status); a letter other tools give a meaning (-n: --runs).
std::string meant_option(const std::string& name, const std::vector<OptionSpec>& specs) {
  std::vector<std::string> known;
  for (const auto& s : specs) known.push_back("--" + s.name);
  if (name.size() == 2 && name[0] == '-' && name[1] != '-') {
    for (const auto& [letter, meaning] : kLetterMeanings) {
      if (letter == name[1] && find_long(specs, meaning) != nullptr) return std::string("--") + meaning;
    }
    return "";
  }
  const std::string word = name.starts_with("--") ? name : "-" + name;
  if (auto near = nearest_word(word, known)) return *near;
  // One name holding the other as whole '-'-separated parts (--runs in
  // --max-runs, --status in --status-of), when exactly one option does.
  const std::string bare = word.substr(2);
  if (bare.size() < 3) return "";
  std::string found;
  for (const auto& s : specs) {
    const std::string full = "-" + s.name + "-";
    const bool contains = full.find("-" + bare + "-") != std::string::npos;
    const bool contained = ("-" + bare + "-").find(full) != std::string::npos;
    if (!contains && !contained) continue;
    if (!found.empty()) return "";  // two candidates: no guess
    found = "--" + s.name;
  }
  return found;
}

// "unknown option --jsno; did you mean --json?" when one is that close.
std::string unknown_option(const std::string& given, const std::vector<OptionSpec>& specs) {
  // A long option's name ends at '=' (its value is not shown); "--=x" and
  // short options ("-h=1") are named as they were given.
  const auto eq = given.find('=');
  const std::string name = given.starts_with("--") && eq != std::string::npos && eq > 2 ? given.substr(0, eq) : given;
  std::string message = "unknown option " + name;
  if (const std::string meant = meant_option(name, specs); !meant.empty()) message += "; did you mean " + meant + "?";
  return message;
}

// The words before "--", each option by its long name followed by its value
// (CLI11 takes the word after an option that needs one as its value,
// whatever it looks like: "-", "--json", "--", "", as getopt does). Secret
// values are overwritten in argv here.
struct Words {
  std::vector<std::string> words;
  bool help = false;             // --help or -h, anywhere before "--"
  std::optional<std::string> error;  // the first malformed option, if any
};

Words split_words(int argc, char** argv, int first, const std::vector<OptionSpec>& specs, bool& has_dashdash,
                  std::vector<std::string>& after_dashdash) {
  Words w;
  const auto fail = [&](const std::string& message) {
    if (!w.error) w.error = message;
  };
  for (int i = first; i < argc; ++i) {
    const std::string arg = argv[i];
    if (arg == "--") {
      has_dashdash = true;
      for (++i; i < argc; ++i) after_dashdash.emplace_back(argv[i]);
      break;
    }
    const OptionSpec* spec = nullptr;
    std::optional<std::string> inline_value;
    std::string typed = arg;  // as the user wrote it, for messages
    if (arg.size() > 2 && arg.starts_with("--")) {
      std::string name = arg.substr(2);
      if (const auto eq = name.find('='); eq != std::string::npos) {
        inline_value = name.substr(eq + 1);
        name.resize(eq);
      }
      typed = "--" + name;
      spec = find_long(specs, name);
    } else if (arg.size() == 2 && arg[0] == '-' && arg[1] != '-') {
      spec = find_short(specs, arg[1]);
    }
    if (spec == nullptr) {  // a positional, a bundle of short flags, or an unknown option: CLI11 tells
      w.words.push_back(arg);
      continue;
    }
    if (!spec->takes_value) {
      if (inline_value) fail("option " + typed + " takes no value");
      if (spec->name == "help") w.help = true;
      w.words.push_back("--" + spec->name);
      continue;
    }
    char* held = nullptr;  // where argv holds the value
    std::string value;
    if (inline_value) {
      value = *inline_value;
      held = argv[i] + (arg.size() - value.size());
    } else if (i + 1 < argc) {
      value = argv[++i];
      held = argv[i];
    } else {
      fail("option " + typed + " needs a value");
      continue;
    }
    if (spec->secret) std::fill(held, held + value.size(), '*');
    w.words.push_back("--" + spec->name);
    w.words.push_back(std::move(value));
  }
  return w;
}

}  // namespace

Expected<Args> Args::parse(int argc, char** argv, int first, const std::vector<OptionSpec>& verb_specs,
                           const std::string& command) {
  const std::string help = " (see: pillbox " + command + " --help)";
  const std::vector<OptionSpec> specs = complete_specs(verb_specs);
  Args a;
  Words words = split_words(argc, argv, first, specs, a.has_dashdash_, a.after_dashdash_);
  if (words.help) {
    Args asked;
    asked.values_["help"].emplace_back();
    return asked;
  }
  if (words.error) return Error{*words.error + help};

  CLI::App app{"", "pillbox " + command};
  app.set_help_flag();  // --help is one of the specs, read above
  app.allow_extras();   // unknown options are named below, with a suggestion
  std::map<std::string, CLI::Option*> options;
  for (const auto& s : specs) {
    const std::string names = (s.short_name != 0 ? std::string("-") + s.short_name + "," : "") + "--" + s.name;
    CLI::Option* o = s.takes_value ? app.add_option(names) : app.add_flag(names);
    o->multi_option_policy(CLI::MultiOptionPolicy::TakeAll);
    options[s.name] = o;
  }
  std::vector<std::string> positional;
  app.add_option("positional", positional)->multi_option_policy(CLI::MultiOptionPolicy::TakeAll);
  std::vector<std::string> reversed(words.words.rbegin(), words.words.rend());
  try {
    app.parse(reversed);
  } catch (const CLI::ArgumentMismatch& e) {  // "-qj" at the end: -j without its value
    const std::string what = e.what();
    return Error{"option " + what.substr(0, what.find(':')) + " needs a value" + help};
  } catch (const CLI::Error& e) {
    return Error{std::string("bad option: ") + e.what() + help};
  }
  // What CLI11 did not match, and words it would take as positionals that
  // look like options ("---x", "-5"): "-" alone is the only positional that
  // starts with '-' (stdin); a file named -x is ./-x.
  std::vector<std::string> unmatched = app.remaining();
  for (const auto* words_left : {&unmatched, &positional}) {
    for (const auto& word : *words_left) {
      if (word.size() > 1 && word[0] == '-') return Error{unknown_option(word, specs) + help};
    }
  }
  for (const auto& s : specs) {
    const CLI::Option* o = options[s.name];
    const std::size_t times = o->count();
    if (times == 0) continue;
    if (times > 1 && !s.repeatable) return Error{"option --" + s.name + " given twice" + help};
    auto& slot = a.values_[s.name];
    if (s.takes_value) {
      slot = o->results();
    } else {
      slot.assign(times, "");
    }
  }
  a.positional_ = std::move(positional);
  return a;
}

std::optional<Args> parse_command(int argc, char** argv, int first, const std::vector<OptionSpec>& specs,
                                  const std::string& command, const char* help, int& exit_code,
                                  const std::string& named_as) {
  auto args = Args::parse(argc, argv, first, specs, command);
  if (!args) {
    exit_code = command_error(named_as.empty() ? command : named_as, args.error(), kExitUsage);
    return std::nullopt;
  }
  if (args->flag("help")) {
    std::fputs(help, stdout);
    exit_code = kExitOk;
    return std::nullopt;
  }
  return std::move(*args);
}

std::optional<std::string> Args::value(const std::string& name) const {
  auto it = values_.find(name);
  if (it == values_.end() || it->second.empty()) return std::nullopt;
  return it->second.back();
}

std::vector<std::string> Args::values(const std::string& name) const {
  auto it = values_.find(name);
  return it == values_.end() ? std::vector<std::string>{} : it->second;
}

Expected<long> parse_whole_number(const std::string& name, const std::string& text, long min, long max) {
  char* end = nullptr;
  errno = 0;
  const long n = std::strtol(text.c_str(), &end, 10);
  if (text.empty() || *end != '\0' || errno != 0 || n < min || n > max) {
    return Error{"--" + name + " expects a whole number from " + std::to_string(min) + " to " + std::to_string(max) +
                 ", got '" + text + "'"};
  }
  return n;
}

Expected<unsigned> parse_file_mode(const std::string& name, const std::string& text) {
  const bool octal = !text.empty() && text.size() <= 4 && text.find_first_not_of("01234567") == std::string::npos;
  const unsigned long mode = octal ? std::strtoul(text.c_str(), nullptr, 8) : 0;
  if (!octal || mode > 0777) {
    return Error{"--" + name + " expects permission bits in octal, 0000 to 0777 (e.g. 0644), got '" + text + "'"};
  }
  return static_cast<unsigned>(mode);
}

Status read_jobs(const Args& args, std::size_t& jobs) {
  jobs = std::max(1u, std::thread::hardware_concurrency());
  return read_whole_number(args, "jobs", 1, 1024, jobs);
}

Status read_duration(const Args& args, const std::string& name, std::uint64_t min_ms, std::uint64_t max_ms,
                     std::chrono::milliseconds& field) {
  const auto text = args.value(name);
  if (!text) return Status::ok();
  auto ms = parse_duration_arg(*text, "--" + name, min_ms, max_ms);
  if (!ms) return Status::error(ms.error());
  field = std::chrono::milliseconds(static_cast<std::int64_t>(*ms));
  return Status::ok();
}

}  // namespace pillbox::cli
