#include "shared/policy_parser.h"

#include <fcntl.h>
#include <seccomp.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <limits>
#include <map>
#include <optional>
#include <sstream>
#include <system_error>
#include <utility>
#include <vector>

#include "shared/embedded_policies.h"
#include "shared/oci_import.h"
#include "shared/regular_file_read.h"

namespace pillbox {
namespace {

// Caps that keep a hostile or mistaken input from costing more than a
// moment: a real policy is a few KiB with short lines.
constexpr std::size_t kMaxPolicyBytes = 1 << 20;
constexpr std::size_t kMaxLineBytes = 64 << 10;
constexpr std::size_t kMaxProfileBytes = 4 << 20;  // Docker's default profile is ~20 KiB
// Longest input text quoted back in a message, so errors stay readable.
constexpr std::size_t kMaxQuotedBytes = 48;
// Words longer than this get no "did you mean": no syscall or key is that long,
// and the edit distance is quadratic.
constexpr std::size_t kMaxSuggestLength = 64;

constexpr std::uint64_t kKiB = 1ull << 10;
constexpr std::uint64_t kMiB = 1ull << 20;
constexpr std::uint64_t kGiB = 1ull << 30;
constexpr std::uint64_t kTiB = 1ull << 40;
constexpr std::uint64_t kSecond = 1000;  // durations are kept in milliseconds
constexpr std::uint64_t kMinute = 60 * kSecond;
constexpr std::uint64_t kHour = 60 * kMinute;
constexpr std::uint64_t kDay = 24 * kHour;

// ---------------------------------------------------------------- text helpers

bool is_blank(char c) { return c == ' ' || c == '\t'; }

std::string_view trim(std::string_view s) {
  while (!s.empty() && is_blank(s.front())) s.remove_prefix(1);
  while (!s.empty() && is_blank(s.back())) s.remove_suffix(1);
  return s;
}

std::string lowercase(std::string_view s) {
  std::string out(s);
  for (char& c : out) {
    if (c >= 'A' && c <= 'Z') c = static_cast<char>(c - 'A' + 'a');
  }
  return out;
}

bool is_digit(char c) { return c >= '0' && c <= '9'; }

bool is_name_char(char c) {
  return is_digit(c) || (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || c == '.' ||
         c == '_' || c == '-';
}

std::string quoted(std::string_view s) {
  if (s.size() <= kMaxQuotedBytes) return "'" + std::string(s) + "'";
  return "'" + std::string(s.substr(0, kMaxQuotedBytes)) + "...'";
}

template <class Range>
std::string join(const Range& words, std::string_view prefix = "", std::string_view suffix = "") {
  std::string out;
  for (const auto& w : words) {
    if (!out.empty()) out += ", ";
    out.append(prefix).append(w).append(suffix);
  }
  return out;
}

// Optimal string alignment distance: a swapped pair of letters ("sokcet")
// counts as one edit, the commonest typo.
std::size_t edit_distance(std::string_view a, std::string_view b) {
  const std::size_t cols = b.size() + 1;
  std::vector<std::size_t> d((a.size() + 1) * cols);
  auto at = [&](std::size_t i, std::size_t j) -> std::size_t& { return d[i * cols + j]; };
  for (std::size_t i = 0; i <= a.size(); ++i) at(i, 0) = i;
  for (std::size_t j = 0; j <= b.size(); ++j) at(0, j) = j;
  for (std::size_t i = 1; i <= a.size(); ++i) {
    for (std::size_t j = 1; j <= b.size(); ++j) {
      const std::size_t cost = a[i - 1] == b[j - 1] ? 0 : 1;
      at(i, j) = std::min({at(i - 1, j) + 1, at(i, j - 1) + 1, at(i - 1, j - 1) + cost});
      if (i > 1 && j > 1 && a[i - 1] == b[j - 2] && a[i - 2] == b[j - 1]) {
        at(i, j) = std::min(at(i, j), at(i - 2, j - 2) + 1);
      }
    }
  }
  return at(a.size(), b.size());
}

// "; did you mean 'x'?" for the nearest candidate within a typo's reach, else "".
template <class Range>
std::string did_you_mean(std::string_view word, const Range& candidates) {
  if (word.size() > kMaxSuggestLength) return "";
  const std::size_t reach = word.size() <= 3 ? 1 : 2;
  std::string_view best;
  std::size_t best_distance = reach + 1;
  for (const auto& candidate : candidates) {
    const std::size_t distance = edit_distance(word, candidate);
    if (distance < best_distance) {
      best_distance = distance;
      best = candidate;
    }
  }
  return best.empty() ? "" : "; did you mean '" + std::string(best) + "'?";
}

std::string errno_text(int err) { return std::error_code(err, std::generic_category()).message(); }

// Reads a whole file, refusing more than `cap` bytes (a policy path could
// name /dev/zero or a log file by mistake). `what` names the file's role.
Expected<std::string> read_file_capped(const std::string& path, std::size_t cap,
                                       std::string_view what) {
  using Failure = RegularFileRead::Failure;
  const std::string name = std::string(what) + " '" + path + "'";
  // A FIFO named as a policy opens at once (and is refused below) instead
  // of waiting forever for a writer.
  const UniqueFd fd = open_for_reading_at(AT_FDCWD, path, 0);
  if (!fd.valid()) return Error{"cannot read " + name + ": " + errno_text(errno)};
  RegularFileRead read = read_whole_regular_fd(fd.get(), cap);
  if (read.failure == Failure::kNone) return std::move(read.bytes);
  if (read.failure == Failure::kSystem) return Error{"cannot read " + name + ": " + errno_text(read.error)};
  if (read.failure == Failure::kNotRegular) return Error{"cannot read " + name + ": not a regular file"};
  return Error{name + " is larger than the " + std::to_string(cap) + " byte limit; is it the right file?"};
}

// ---------------------------------------------------------------- quantities

enum class Quantity : std::uint8_t { kDuration, kSize, kCount };

// Largest first: format_quantity picks the largest unit that divides exactly.
constexpr std::pair<std::string_view, std::uint64_t> kSizeUnits[] = {
    {"T", kTiB}, {"G", kGiB}, {"M", kMiB}, {"K", kKiB}};

std::optional<std::uint64_t> duration_factor(std::string_view unit) {
  if (unit.empty() || unit == "s") return kSecond;  // a bare number means seconds
  if (unit == "ms") return 1;
  if (unit == "m") return kMinute;
  if (unit == "h") return kHour;
  if (unit == "d") return kDay;
  return std::nullopt;
}

// "", "b", and K/M/G/T with an optional "b" or "ib": all powers of 1024.
std::optional<std::uint64_t> size_factor(std::string_view unit) {
  if (unit.empty() || unit == "b") return 1;
  if (unit.ends_with("ib")) {
    unit.remove_suffix(2);
  } else if (unit.ends_with("b")) {
    unit.remove_suffix(1);
  }
  if (unit.size() != 1) return std::nullopt;
  const std::size_t power = std::string_view("kmgt").find(unit[0]);
  if (power == std::string_view::npos) return std::nullopt;
  return 1ull << (10 * (power + 1));
}

std::string format_quantity(Quantity q, std::uint64_t v) {
  switch (q) {
    case Quantity::kDuration:
      if (v == 0) return "0s";
      if (v % kHour == 0) return std::to_string(v / kHour) + "h";
      if (v % kMinute == 0) return std::to_string(v / kMinute) + "m";
      if (v % kSecond == 0) return std::to_string(v / kSecond) + "s";
      return std::to_string(v) + "ms";
    case Quantity::kSize:
      for (const auto& [unit, factor] : kSizeUnits) {
        if (v != 0 && v % factor == 0) return std::to_string(v / factor) + std::string(unit);
      }
      return std::to_string(v);
    case Quantity::kCount:
      return std::to_string(v);
  }
  return std::to_string(v);
}

std::string accepted_forms(Quantity q) {
  switch (q) {
    case Quantity::kDuration:
      return "write a whole number with a unit: 500ms, 5s, 2m, 1h or 7d (a bare number means seconds)";
    case Quantity::kSize:
      return "write a whole number with an optional unit: 4096 (bytes), 64K, 256M, 1G, 256MiB "
             "(K/M/G/T are powers of 1024)";
    case Quantity::kCount:
      return "write a whole number such as 64";
  }
  return "";
}

std::string_view quantity_noun(Quantity q) {
  switch (q) {
    case Quantity::kDuration: return "duration";
    case Quantity::kSize: return "size";
    case Quantity::kCount: return "number";
  }
  return "value";
}

struct LimitKey {
  std::string_view key;
  Quantity quantity;
  std::uint64_t Limits::*field;
  std::uint64_t min;
  std::uint64_t max;
};

// Ranges: below the minimums the runtime itself cannot start (or RLIMIT_CPU,
// which counts whole seconds, would be 0 = unlimited); the maximums catch
// typos and keep arithmetic on limits (RLIMIT_AS adds a baseline) far from
// overflow.
constexpr LimitKey kLimitKeys[] = {
    {"cpu", Quantity::kDuration, &Limits::cpu_ms, kSecond, 24 * kHour},
    {"wall", Quantity::kDuration, &Limits::wall_ms, 100, 24 * kHour},
    {"memory", Quantity::kSize, &Limits::memory_bytes, kMiB, kTiB},
    {"file_size", Quantity::kSize, &Limits::file_size_bytes, 0, kTiB},
    {"open_files", Quantity::kCount, &Limits::open_files, 4, 1 << 20},
    {"processes", Quantity::kCount, &Limits::processes, 1, 1 << 22},
    {"stack", Quantity::kSize, &Limits::stack_bytes, 64 * kKiB, kGiB},
    {"output", Quantity::kSize, &Limits::output_bytes, 1, kGiB},
};

// ---------------------------------------------------------------- schema

constexpr std::string_view kSectionNames[] = {"policy", "limits", "isolation", "seccomp"};
constexpr std::string_view kPolicyKeys[] = {"name", "allow_unsafe"};
constexpr std::string_view kIsolationKeys[] = {"network", "user", "uid_pool", "cgroup", "filesystem", "tmp", "writable", "share"};
constexpr std::string_view kSeccompKeys[] = {"enabled", "default", "allow", "import_oci"};

std::vector<std::string_view> keys_of(std::string_view section) {
  if (section == "policy") return {std::begin(kPolicyKeys), std::end(kPolicyKeys)};
  if (section == "isolation") return {std::begin(kIsolationKeys), std::end(kIsolationKeys)};
  if (section == "seccomp") return {std::begin(kSeccompKeys), std::end(kSeccompKeys)};
  std::vector<std::string_view> keys;
  for (const LimitKey& k : kLimitKeys) keys.push_back(k.key);
  return keys;
}

// Keys whose lines add to a list instead of setting a value.
bool is_repeatable(std::string_view section, std::string_view key) {
  return (section == "seccomp" && (key == "allow" || key == "import_oci")) ||
         (section == "isolation" && (key == "writable" || key == "share"));
}

constexpr SeccompDefault kSeccompDefaults[] = {SeccompDefault::kTrap, SeccompDefault::kKill,
                                               SeccompDefault::kErrno};
constexpr CgroupMode kCgroupModes[] = {CgroupMode::kAuto, CgroupMode::kRequired, CgroupMode::kOff};
constexpr FilesystemMode kFilesystemModes[] = {FilesystemMode::kReadOnly, FilesystemMode::kHost};

// Matches a value against the enum's to_string spellings, so the format and
// the model cannot drift apart.
template <class E, std::size_t N>
Status parse_enum(std::string_view key, std::string_view value, const E (&all)[N], E& out) {
  const std::string wanted = lowercase(value);
  std::vector<std::string_view> words;
  for (E e : all) {
    if (to_string(e) == wanted) {
      out = e;
      return Status::ok();
    }
    words.push_back(to_string(e));
  }
  return Status::error("unknown value " + quoted(value) + " for " + std::string(key) +
                       " (choices: " + join(words) + ")");
}

Status parse_switch(std::string_view key, std::string_view value, std::string_view on,
                    std::string_view off, bool& out) {
  const std::string wanted = lowercase(value);
  if (wanted == on || wanted == off) {
    out = wanted == on;
    return Status::ok();
  }
  return Status::error("unknown value " + quoted(value) + " for " + std::string(key) +
                       " (choices: " + std::string(on) + ", " + std::string(off) + ")");
}

bool is_valid_policy_name(std::string_view name) {
  return !name.empty() && name.size() <= 64 && std::all_of(name.begin(), name.end(), is_name_char);
}

// A numeric uid, or a portable user name (the name is looked up only when
// privileges are dropped, on the host that runs the child).
// "FIRST-LAST": a range of unused uids, one per job slot (see policy.h).
// Kept clear of system and login uids (< 100000) and of the 32-bit sign bit
// that some tools mishandle.
Status parse_uid_pool(std::string_view value, Isolation& iso) {
  const auto dash = value.find('-');
  auto number = [](std::string_view text, std::uint64_t& out) {
    if (text.empty() || text.size() > 10) return false;
    out = 0;
    for (char c : text) {
      if (c < '0' || c > '9') return false;
      out = out * 10 + static_cast<std::uint64_t>(c - '0');
    }
    return true;
  };
  std::uint64_t first = 0, last = 0;
  if (dash == std::string_view::npos || !number(value.substr(0, dash), first) || !number(value.substr(dash + 1), last)) {
    return Status::error("bad uid_pool " + quoted(value) + "; write FIRST-LAST, e.g. 2000000000-2000001023");
  }
  if (first < 100000 || last > 2147483646 || last < first || last - first >= 65536) {
    return Status::error("uid_pool " + quoted(value) +
                         " out of range; use unused uids between 100000 and 2147483646, at most 65536 of them");
  }
  iso.uid_pool_first = static_cast<std::uint32_t>(first);
  iso.uid_pool_size = static_cast<std::uint32_t>(last - first + 1);
  return Status::ok();
}

bool is_valid_user(std::string_view user) {
  if (!user.empty() && std::all_of(user.begin(), user.end(), is_digit)) {
    // (uid_t)-1 means "no change" to setresuid and cannot be a target.
    return user.size() <= 10 && std::stoull(std::string(user)) < 0xFFFFFFFFull;
  }
  return !user.empty() && user.size() <= 32 && user.front() != '-' &&
         std::all_of(user.begin(), user.end(), is_name_char);
}

// Every syscall name libseccomp knows for this architecture, for suggestions.
// Syscall numbers on x86_64 and aarch64 all lie below 1024.
const std::vector<std::string>& native_syscall_names() {
  static const std::vector<std::string> names = [] {
    std::vector<std::string> out;
    const std::uint32_t arch = seccomp_arch_native();
    for (int nr = 0; nr < 1024; ++nr) {
      if (char* name = seccomp_syscall_resolve_num_arch(arch, nr)) {
        out.emplace_back(name);
        ::free(name);
      }
    }
    return out;
  }();
  return names;
}

Status check_syscall(const std::string& name) {
  const int nr = seccomp_syscall_resolve_name(name.c_str());
  if (nr == __NR_SCMP_ERROR) {
    std::string hint = did_you_mean(name, native_syscall_names());
    if (hint.empty()) hint = "; use the kernel's names as in `man 2 syscalls` (e.g. pread64, newfstatat)";
    return Status::error("unknown syscall " + quoted(name) + hint);
  }
  if (nr < 0) {  // libseccomp knows it, but only for other architectures
    return Status::error("syscall " + quoted(name) +
                         " does not exist on this architecture; remove it");
  }
  return Status::ok();
}

std::string default_name_from_origin(std::string_view origin) {
  std::string_view stem = origin.substr(origin.rfind('/') + 1);  // npos + 1 == 0
  if (stem.ends_with(".policy")) stem.remove_suffix(std::string_view(".policy").size());
  return is_valid_policy_name(stem) ? std::string(stem) : Policy{}.name;
}

// A whole number with a unit of `q`, within [min, max] (defined below).
Expected<std::uint64_t> parse_quantity(Quantity q, std::string_view value, const std::string& name, std::uint64_t min,
                                       std::uint64_t max);

// ---------------------------------------------------------------- the parser

class Parser {
 public:
  // `reads_files`: false for a text someone else wrote (parse_claimed_policy).
  Parser(std::string_view origin, const std::string& base_dir, bool reads_files = true)
      : origin_(origin), base_dir_(base_dir), reads_files_(reads_files) {
    policy_.origin = std::string(origin);
  }

  Expected<Policy> parse(std::string_view text) {
    if (text.size() > kMaxPolicyBytes) {
      return Error{std::string(origin_) + ": policy is " + std::to_string(text.size()) +
                   " bytes, more than the " + std::to_string(kMaxPolicyBytes) +
                   " byte limit; is it the right file?"};
    }
    if (text.starts_with("\xEF\xBB\xBF")) text.remove_prefix(3);  // UTF-8 BOM from some editors
    while (!text.empty()) {
      ++line_no_;
      const std::size_t end = text.find('\n');
      std::string_view line = text.substr(0, end);
      text.remove_prefix(end == std::string_view::npos ? text.size() : end + 1);
      if (Status st = parse_line(line); !st) return Error{st.message()};
    }
    std::vector<std::string>& allow = policy_.seccomp.allow;
    std::sort(allow.begin(), allow.end());
    allow.erase(std::unique(allow.begin(), allow.end()), allow.end());
    if (!name_set_) policy_.name = default_name_from_origin(origin_);
    if (Status st = check_unsafe(); !st) return Error{st.message()};
    return std::move(policy_);
  }

 private:
  Status fail(const std::string& message) const { return fail_at(line_no_, message); }
  Status fail_at(int line, const std::string& message) const {
    return Status::error(std::string(origin_) + ":" + std::to_string(line) + ": " + message);
  }

  // A setting that switches confinement off must be meant: refused unless
  // [policy] says allow_unsafe = yes. The error points at the setting.
  Status check_unsafe() const {
    if (policy_.allow_unsafe) return Status::ok();
    const std::vector<std::string> unsafe = unsafe_settings(policy_);
    if (unsafe.empty()) return Status::ok();
    const bool user = unsafe.front().starts_with("user");
    const auto at = first_line_.find(user ? "isolation.user" : "seccomp.enabled");
    return fail_at(at == first_line_.end() ? line_no_ : at->second,
                   "unsafe setting " + unsafe.front() +
                   "; if you mean it, add 'allow_unsafe = yes' under [policy]");
  }

  Status parse_line(std::string_view line) {
    if (line.ends_with('\r')) line.remove_suffix(1);  // CRLF files
    if (line.size() > kMaxLineBytes) {
      return fail("line is longer than " + std::to_string(kMaxLineBytes) + " bytes; split it");
    }
    for (std::size_t i = 0; i < line.size(); ++i) {
      const auto c = static_cast<unsigned char>(line[i]);
      if ((c < 0x20 && c != '\t') || c == 0x7f) {
        char hex[8];
        std::snprintf(hex, sizeof hex, "0x%02x", c);
        return fail("control character " + std::string(hex) + " at column " +
                    std::to_string(i + 1) + "; policy files are plain text");
      }
    }
    line = trim(line.substr(0, line.find('#')));
    if (line.empty()) return Status::ok();
    if (line.front() == '[') return open_section(line);
    if (section_.empty()) {
      return fail(quoted(line) + " is outside any section; put it under a header such as [limits]");
    }
    const std::size_t eq = line.find('=');
    if (eq == std::string_view::npos) {
      return fail("missing '=' in " + quoted(line) + "; write 'key = value'");
    }
    return assign(trim(line.substr(0, eq)), trim(line.substr(eq + 1)));
  }

  Status open_section(std::string_view header) {
    if (!header.ends_with(']')) {
      return fail("malformed section header " + quoted(header) + "; write it as [limits]");
    }
    const std::string_view name = trim(header.substr(1, header.size() - 2));
    if (std::find(std::begin(kSectionNames), std::end(kSectionNames), name) ==
        std::end(kSectionNames)) {
      return fail("unknown section [" + std::string(name.substr(0, kMaxQuotedBytes)) + "] (known: " +
                  join(kSectionNames, "[", "]") + ")" + did_you_mean(name, kSectionNames));
    }
    Status st = first_time(std::string(name), "section [" + std::string(name) + "] appears twice",
                           "put all its keys under one header");
    if (!st) return st;
    section_ = name;
    return Status::ok();
  }

  // Records where `id` was first seen; an error naming that line if it was.
  Status first_time(const std::string& id, const std::string& what, std::string_view advice) {
    auto [it, inserted] = first_line_.emplace(id, line_no_);
    if (inserted) return Status::ok();
    return fail(what + " (first at line " + std::to_string(it->second) + "); " + std::string(advice));
  }

  Status assign(std::string_view key, std::string_view value) {
    if (key.empty()) return fail("missing key before '='; write 'key = value'");
    const std::vector<std::string_view> keys = keys_of(section_);
    if (std::find(keys.begin(), keys.end(), key) == keys.end()) {
      return fail("unknown key " + quoted(key) + " in [" + section_ + "] (known: " + join(keys) +
                  ")" + did_you_mean(key, keys));
    }
    if (!is_repeatable(section_, key)) {
      Status st = first_time(section_ + "." + std::string(key),
                             "duplicate key '" + std::string(key) + "' in [" + section_ + "]",
                             "keep one of them");
      if (!st) return st;
    }
    if (value.empty()) {
      return fail("empty value for '" + std::string(key) + "'; give a value or delete the line");
    }
    Status st = set(key, value);
    return st ? st : fail(st.message());
  }

  // Sets one known key; errors carry no position (assign adds it).
  Status set(std::string_view key, std::string_view value) {
    Isolation& iso = policy_.isolation;
    SeccompRules& sec = policy_.seccomp;
    if (section_ == "limits") return set_limit(policy_.limits, key, value);
    if (key == "name") {
      if (!is_valid_policy_name(value)) {
        return Status::error("invalid policy name " + quoted(value) +
                             "; use 1-64 letters, digits, '.', '_' or '-'");
      }
      policy_.name = std::string(value);
      name_set_ = true;
      return Status::ok();
    }
    if (key == "allow_unsafe") return parse_switch(key, value, "yes", "no", policy_.allow_unsafe);
    if (key == "network") return parse_switch(key, value, "on", "off", iso.network);
    if (key == "user") {
      if (!is_valid_user(value)) {
        return Status::error("invalid user " + quoted(value) +
                             "; give a user name (letters, digits, '.', '_', '-') or a numeric uid");
      }
      iso.user = std::string(value);
      return Status::ok();
    }
    if (key == "uid_pool") return parse_uid_pool(value, iso);
    if (key == "tmp") {
      if (lowercase(value) == "none") {
        iso.tmp_bytes = 0;
        return Status::ok();
      }
      auto size = parse_quantity(Quantity::kSize, value, "tmp", kMiB, 64 * kGiB);
      if (!size) return Status::error(size.error() + " (or none)");
      iso.tmp_bytes = *size;
      return Status::ok();
    }
    if (key == "writable") return add_writable(iso, value);
    if (key == "share") return add_shared(iso, value);
    if (key == "cgroup") return parse_enum(key, value, kCgroupModes, iso.cgroup);
    if (key == "filesystem") return parse_enum(key, value, kFilesystemModes, iso.filesystem);
    if (key == "enabled") return parse_switch(key, value, "yes", "no", sec.enabled);
    if (key == "default") return parse_enum(key, value, kSeccompDefaults, sec.default_action);
    if (key == "allow") return add_syscalls(value);
    return import_profile(value);  // the only key left: import_oci
  }

  // Names are separated by blanks (commas are tolerated).
  Status add_syscalls(std::string_view list) {
    while (!list.empty()) {
      const std::size_t start = list.find_first_not_of(" \t,");
      if (start == std::string_view::npos) break;
      list.remove_prefix(start);
      const std::string name(list.substr(0, list.find_first_of(" \t,")));
      list.remove_prefix(name.size());
      if (Status st = check_syscall(name); !st) return st;
      policy_.seccomp.allow.push_back(name);
    }
    return Status::ok();
  }

  Status import_profile(std::string_view value) {
    if (!reads_files_) {
      return Status::error("import_oci is not taken from this text: it would read a file of this host (a record's "
                           "policy never has it; `pillbox policy show` writes the imported list out)");
    }
    std::string path(value);
    if (!path.starts_with('/') && !base_dir_.empty()) path = base_dir_ + "/" + path;
    Expected<std::string> json = read_file_capped(path, kMaxProfileBytes, "seccomp profile");
    if (!json) return Status::error("import_oci: " + json.error());
    Expected<std::vector<std::string>> names = import_oci_seccomp(*json, path);
    if (!names) return Status::error("import_oci: " + names.error());
    policy_.seccomp.allow.insert(policy_.seccomp.allow.end(), names->begin(), names->end());
    return Status::ok();
  }

  std::string_view origin_;
  const std::string& base_dir_;
  const bool reads_files_;  // false: import_oci is refused
  Policy policy_;
  std::string section_;  // empty before the first header
  int line_no_ = 0;
  std::map<std::string, int> first_line_;  // "limits" or "limits.cpu" -> line first seen
  bool name_set_ = false;
};

}  // namespace

namespace {

// A whole number with a unit of `q`, within [min, max]; errors name `name`.
Expected<std::uint64_t> parse_quantity(Quantity q, std::string_view value, const std::string& name, std::uint64_t min,
                                       std::uint64_t max) {
  value = trim(value);
  std::size_t i = 0;
  std::uint64_t n = 0;
  bool overflow = false;
  for (; i < value.size() && is_digit(value[i]); ++i) {
    const std::uint64_t digit = static_cast<std::uint64_t>(value[i] - '0');
    if (n > (std::numeric_limits<std::uint64_t>::max() - digit) / 10) overflow = true;
    n = n * 10 + digit;
  }
  const std::string unit = lowercase(trim(value.substr(i)));
  std::optional<std::uint64_t> factor;
  if (q == Quantity::kDuration) factor = duration_factor(unit);
  if (q == Quantity::kSize) factor = size_factor(unit);
  if (q == Quantity::kCount && unit.empty()) factor = 1;
  if (i == 0 || !factor) {
    return Error{"bad " + std::string(quantity_noun(q)) + " " + quoted(value) + " for " + name + "; " +
                 accepted_forms(q)};
  }
  if (overflow || n > std::numeric_limits<std::uint64_t>::max() / *factor || n * *factor < min || n * *factor > max) {
    return Error{name + " " + quoted(value) + " is out of range; use " + format_quantity(q, min) + " to " +
                 format_quantity(q, max)};
  }
  return n * *factor;
}

}  // namespace

namespace {

// Adds the absolute host paths in `list` (whitespace-separated) to `paths`,
// once each, without a trailing '/'. `what` names them in errors.
Status add_host_paths(std::vector<std::string>& paths, std::string_view list, const std::string& what,
                      const std::string& example, const std::string& whole_system) {
  std::istringstream words{std::string(list)};
  for (std::string path; words >> path;) {
    if (!path.starts_with('/')) {
      return Status::error(what + " path " + quoted(path) + " is not absolute; write it from the root, e.g. " + example);
    }
    for (std::size_t start = 1; start <= path.size();) {
      const std::size_t end = std::min(path.find('/', start), path.size());
      const std::string_view part = std::string_view(path).substr(start, end - start);
      if (part == "." || part == "..") {
        return Status::error(what + " path " + quoted(path) + " has a '" + std::string(part) +
                             "' component; write the path it means");
      }
      start = end + 1;
    }
    while (path.size() > 1 && path.back() == '/') path.pop_back();
    if (path == "/") return Status::error(what + " path '/' would " + whole_system + "; name a directory");
    if (std::find(paths.begin(), paths.end(), path) == paths.end()) paths.push_back(path);
  }
  return Status::ok();
}

}  // namespace

Status add_writable(Isolation& isolation, std::string_view list) {
  return add_host_paths(isolation.writable, list, "writable", "/srv/out", "make the whole file system writable");
}

Status add_shared(Isolation& isolation, std::string_view list) {
  return add_host_paths(isolation.shared, list, "shared", "/srv/data", "show the whole host, /tmp included");
}

Status set_limit(Limits& limits, std::string_view key, std::string_view value) {
  auto spec = std::find_if(std::begin(kLimitKeys), std::end(kLimitKeys),
                           [&](const LimitKey& k) { return k.key == key; });
  if (spec == std::end(kLimitKeys)) {
    return Status::error("unknown limit " + quoted(key) + " (known: " + join(keys_of("limits")) +
                         ")");
  }
  auto parsed = parse_quantity(spec->quantity, value, std::string(key), spec->min, spec->max);
  if (!parsed) return Status::error(parsed.error());
  limits.*(spec->field) = *parsed;
  return Status::ok();
}

Expected<std::uint64_t> parse_duration_ms(std::string_view value, const std::string& name, std::uint64_t min_ms,
                                          std::uint64_t max_ms) {
  return parse_quantity(Quantity::kDuration, value, name, min_ms, max_ms);
}

Expected<Policy> parse_policy(std::string_view text, std::string_view origin,
                              const std::string& base_dir) {
  return Parser(origin, base_dir).parse(text);
}

Expected<Policy> parse_claimed_policy(std::string_view text, std::string_view origin) {
  const std::string no_base;
  return Parser(origin, no_base, /*reads_files=*/false).parse(text);
}

Expected<Policy> load_policy_file(const std::string& path) {
  Expected<std::string> text = read_file_capped(path, kMaxPolicyBytes, "policy file");
  if (!text) return Error{text.error()};
  const std::size_t slash = path.rfind('/');
  const std::string base_dir = slash == std::string::npos ? "" : slash == 0 ? "/" : path.substr(0, slash);
  return parse_policy(*text, path, base_dir);
}

Expected<Policy> resolve_policy(const std::string& name_or_path) {
  if (name_or_path.find('/') != std::string::npos || name_or_path.ends_with(".policy")) {
    return load_policy_file(name_or_path);
  }
  std::vector<std::string_view> shipped;
  for (const EmbeddedPolicy& p : embedded_policies()) {
    if (p.name == name_or_path) return parse_policy(p.text, "builtin:" + name_or_path, "");
    shipped.push_back(p.name);
  }
  std::sort(shipped.begin(), shipped.end());
  return Error{"unknown policy " + quoted(name_or_path) + did_you_mean(name_or_path, shipped) +
               " (shipped: " + join(shipped) +
               "; for your own policy, give a path containing '/' or ending in .policy)"};
}

std::string format_policy(const Policy& p) {
  std::string out;
  auto line = [&out](std::string_view key, std::string_view value) {
    out.append(key).append(" = ").append(value).append("\n");
  };
  out += "[policy]\n";
  line("name", p.name);
  if (p.allow_unsafe) line("allow_unsafe", "yes");

  out += "\n[limits]\n";
  for (const LimitKey& k : kLimitKeys) line(k.key, format_quantity(k.quantity, p.limits.*(k.field)));

  out += "\n[isolation]\n";
  line("network", p.isolation.network ? "on" : "off");
  line("user", p.isolation.user);
  if (p.isolation.uid_pool_size > 0) {
    line("uid_pool", std::to_string(p.isolation.uid_pool_first) + "-" +
                         std::to_string(std::uint64_t{p.isolation.uid_pool_first} + p.isolation.uid_pool_size - 1));
  }
  line("cgroup", to_string(p.isolation.cgroup));
  line("filesystem", to_string(p.isolation.filesystem));
  if (p.isolation.tmp_bytes != 0) line("tmp", format_quantity(Quantity::kSize, p.isolation.tmp_bytes));
  for (const std::string& path : p.isolation.writable) line("writable", path);
  for (const std::string& path : p.isolation.shared) line("share", path);

  out += "\n[seccomp]\n";
  line("enabled", p.seccomp.enabled ? "yes" : "no");
  line("default", to_string(p.seccomp.default_action));
  // Wrapped to readable lines; repeated `allow` lines accumulate.
  std::vector<std::string> allow = p.seccomp.allow;
  std::sort(allow.begin(), allow.end());
  allow.erase(std::unique(allow.begin(), allow.end()), allow.end());
  std::string names;
  for (const std::string& name : allow) {
    if (!names.empty() && names.size() + 1 + name.size() > 64) {
      line("allow", names);
      names.clear();
    }
    if (!names.empty()) names += ' ';
    names += name;
  }
  if (!names.empty()) line("allow", names);
  return out;
}

}  // namespace pillbox
