#include "supervisor/cli/args.h"

#include <algorithm>
#include <cerrno>
#include <cstdlib>
#include <thread>

#include "shared/policy_parser.h"

namespace pillbox::cli {

Expected<Args> Args::parse(int argc, char** argv, int first, const std::vector<OptionSpec>& specs,
                           const std::string& command) {
  Args a;
  const std::string help = " (see: pillbox " + command + " --help)";
  for (int i = first; i < argc; ++i) {
    std::string arg = argv[i];
    if (arg == "--") {
      a.has_dashdash_ = true;
      for (++i; i < argc; ++i) a.after_dashdash_.emplace_back(argv[i]);
      break;
    }
    if (arg.size() > 2 && arg.compare(0, 2, "--") == 0) {
      std::string name = arg.substr(2);
      std::optional<std::string> inline_value;
      if (const auto eq = name.find('='); eq != std::string::npos) {
        inline_value = name.substr(eq + 1);
        name.resize(eq);
      }
      const OptionSpec* spec = nullptr;
      for (const auto& s : specs) {
        if (s.name == name) spec = &s;
      }
      if (spec == nullptr) return Error{"unknown option --" + name + help};
      std::string value;
      if (spec->takes_value) {
        char* held = nullptr;  // where argv holds the value
        if (inline_value) {
          value = *inline_value;
          held = argv[i] + 2 + name.size() + 1;
        } else if (i + 1 < argc) {
          value = argv[++i];
          held = argv[i];
        } else {
          return Error{"option --" + name + " needs a value" + help};
        }
        if (spec->secret) std::fill(held, held + value.size(), '*');
      } else if (inline_value) {
        return Error{"option --" + name + " takes no value" + help};
      }
      auto& slot = a.values_[name];
      if (!slot.empty() && !spec->repeatable) return Error{"option --" + name + " given twice" + help};
      slot.push_back(std::move(value));
      continue;
    }
    if (arg.size() == 2 && arg[0] == '-' && arg[1] != '-') {
      const OptionSpec* spec = nullptr;
      for (const auto& s : specs) {
        if (s.short_name == arg[1]) spec = &s;
      }
      if (spec != nullptr) {
        std::string value;
        if (spec->takes_value) {
          if (i + 1 >= argc) return Error{"option " + arg + " needs a value" + help};
          value = argv[++i];
        }
        auto& slot = a.values_[spec->name];
        if (!slot.empty() && !spec->repeatable) return Error{"option " + arg + " given twice" + help};
        slot.push_back(std::move(value));
        continue;
      }
    }
    if (arg.size() > 1 && arg[0] == '-' && arg != "-") return Error{"unknown option " + arg + help};
    a.positional_.push_back(std::move(arg));
  }
  return a;
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

Expected<std::size_t> read_jobs(const Args& args) {
  const auto v = args.value("jobs");
  if (!v) return static_cast<std::size_t>(std::max(1u, std::thread::hardware_concurrency()));
  auto n = parse_whole_number("jobs", *v, 1, 1024);
  if (!n) return Error{n.error()};
  return static_cast<std::size_t>(*n);
}

Expected<std::chrono::milliseconds> read_duration(const Args& args, const std::string& name,
                                                  std::chrono::milliseconds fallback, std::uint64_t min_ms,
                                                  std::uint64_t max_ms) {
  const auto text = args.value(name);
  if (!text) return fallback;
  auto ms = parse_duration_ms(*text, "--" + name, min_ms, max_ms);
  if (!ms) return Error{ms.error()};
  return std::chrono::milliseconds(static_cast<std::int64_t>(*ms));
}

}  // namespace pillbox::cli
