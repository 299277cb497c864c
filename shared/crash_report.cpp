#include "shared/crash_report.h"

#include <climits>
#include <exception>
#include <optional>

namespace pillbox {
namespace {

constexpr std::string_view kHeader = "pillbox-crash 1";
constexpr std::string_view kEnd = "end";
constexpr std::size_t kMaxModulePath = 4096;  // PATH_MAX

// An unsigned number: "0x" followed by 1..16 hex digits, or plain decimal.
// No sign, no spaces, no empty strings: the writer never produces them.
std::optional<std::uint64_t> parse_u64(std::string_view s) {
  if (s.size() > 2 && s[0] == '0' && (s[1] == 'x' || s[1] == 'X')) {
    s.remove_prefix(2);
    if (s.size() > 16) return std::nullopt;
    std::uint64_t v = 0;
    for (char c : s) {
      int digit;
      if (c >= '0' && c <= '9') digit = c - '0';
      else if (c >= 'a' && c <= 'f') digit = c - 'a' + 10;
      else if (c >= 'A' && c <= 'F') digit = c - 'A' + 10;
      else return std::nullopt;
      v = v << 4 | static_cast<std::uint64_t>(digit);
    }
    return v;
  }
  if (s.empty()) return std::nullopt;
  std::uint64_t v = 0;
  for (char c : s) {
    if (c < '0' || c > '9') return std::nullopt;
    const auto digit = static_cast<std::uint64_t>(c - '0');
    if (v > (UINT64_MAX - digit) / 10) return std::nullopt;
    v = v * 10 + digit;
  }
  return v;
}

// A signed number within [lo, hi]: an optional '-' before an unsigned number.
std::optional<long long> parse_in_range(std::string_view s, long long lo, long long hi) {
  const bool negative = !s.empty() && s[0] == '-';
  if (negative) s.remove_prefix(1);
  const auto magnitude = parse_u64(s);
  if (!magnitude || *magnitude > static_cast<std::uint64_t>(LLONG_MAX)) return std::nullopt;
  const long long v = negative ? -static_cast<long long>(*magnitude)
                               : static_cast<long long>(*magnitude);
  if (v < lo || v > hi) return std::nullopt;
  return v;
}

bool is_valid_module_path(std::string_view path) {
  if (path.size() > kMaxModulePath) return false;
  for (unsigned char c : path) {
    if (c < 0x20 || c == 0x7f) return false;
  }
  return true;
}

// One report's fields, each remembered as seen so duplicates are rejected.
class ReportBuilder {
 public:
  Status add(std::string_view key, std::string_view value) {
    if (key == "frame") return add_frame(value);
    const int field = field_index(key);
    if (field < 0) return Status::error("unknown key '" + std::string(key) + "'");
    if (seen_[field]) return Status::error("duplicated key '" + std::string(key) + "'");
    seen_[field] = true;
    if (!set(field, value)) return Status::error("bad value for '" + std::string(key) + "'");
    return Status::ok();
  }

  // The other fields have meaningful defaults; without these two the report
  // cannot be matched to a process or a signal.
  Status finish() const {
    if (!seen_[kPid]) return Status::error("missing pid");
    if (!seen_[kSignal]) return Status::error("missing signal");
    return Status::ok();
  }

  CrashReport& report() { return report_; }

 private:
  enum Field { kPid, kSignal, kCode, kAddr, kPc, kSp, kSyscall, kArch, kStackFault, kFieldCount };
  static constexpr std::string_view kNames[kFieldCount] = {
      "pid", "signal", "code", "addr", "pc", "sp", "syscall", "arch", "stack_fault"};

  static int field_index(std::string_view key) {
    for (int i = 0; i < kFieldCount; ++i) {
      if (kNames[i] == key) return i;
    }
    return -1;
  }

  bool set(int field, std::string_view value) {
    switch (field) {
      case kPid: return set_int(report_.pid, value, 1, INT_MAX);
      case kSignal: return set_int(report_.signal, value, 1, 64);  // _NSIG - 1 on Linux
      case kCode: return set_int(report_.code, value, INT_MIN, INT_MAX);
      case kAddr: return set_u64(report_.addr, value);
      case kPc: return set_u64(report_.pc, value);
      case kSp: return set_u64(report_.sp, value);
      case kSyscall: return set_int(report_.syscall, value, -1, INT_MAX);
      case kArch: return set_int(report_.arch, value, 0, UINT32_MAX);
      case kStackFault: return set_int(report_.stack_fault, value, 0, 1);
    }
    return false;
  }

  template <class T>
  static bool set_int(T& out, std::string_view value, long long lo, long long hi) {
    const auto v = parse_in_range(value, lo, hi);
    if (!v) return false;
    out = static_cast<T>(*v);
    return true;
  }

  static bool set_u64(std::uint64_t& out, std::string_view value) {
    const auto v = parse_u64(value);
    if (!v) return false;
    out = *v;
    return true;
  }

  // "frame <module path> <offset>": the path may hold spaces, so the offset is
  // after the last one; an unknown module is written as an empty path.
  Status add_frame(std::string_view value) {
    if (report_.frames.size() >= kMaxCrashFrames) return Status::error("too many frames");
    const std::size_t space = value.rfind(' ');
    const std::string_view module = space == std::string_view::npos ? "" : value.substr(0, space);
    const std::string_view offset_text =
        space == std::string_view::npos ? value : value.substr(space + 1);
    if (!is_valid_module_path(module)) return Status::error("bad module path");
    const auto offset = parse_u64(offset_text);
    if (!offset) return Status::error("bad frame offset");
    report_.frames.push_back(RawFrame{std::string(module), *offset});
    return Status::ok();
  }

  CrashReport report_;
  bool seen_[kFieldCount] = {};
};

Expected<CrashReport> parse_report_lines(std::string_view text) {
  if (text.size() > kMaxCrashReportBytes) return Error{"crash report too large"};
  ReportBuilder builder;
  bool header_seen = false;
  std::size_t pos = 0;
  while (pos < text.size()) {
    const std::size_t newline = text.find('\n', pos);
    const std::string_view line =
        text.substr(pos, newline == std::string_view::npos ? std::string_view::npos : newline - pos);
    pos = newline == std::string_view::npos ? text.size() : newline + 1;

    if (!header_seen) {
      if (line != kHeader) return Error{"missing 'pillbox-crash 1' header"};
      header_seen = true;
      continue;
    }
    if (line == kEnd) {
      if (pos != text.size()) return Error{"data after 'end'"};
      if (Status status = builder.finish(); !status) return Error{status.message()};
      return std::move(builder.report());
    }
    const std::size_t space = line.find(' ');
    if (space == std::string_view::npos) return Error{"malformed line"};
    if (Status status = builder.add(line.substr(0, space), line.substr(space + 1)); !status) {
      return Error{status.message()};
    }
  }
  return Error{header_seen ? "missing 'end'" : "missing 'pillbox-crash 1' header"};
}

// Offset of the first line equal to `wanted` at or after `from`, or npos.
std::size_t find_line(std::string_view text, std::string_view wanted, std::size_t from) {
  while (from < text.size()) {
    const std::size_t hit = text.find(wanted, from);
    if (hit == std::string_view::npos) return hit;
    const bool starts_line = hit == 0 || text[hit - 1] == '\n';
    const std::size_t after = hit + wanted.size();
    const bool ends_line = after == text.size() || text[after] == '\n';
    if (starts_line && ends_line) return hit;
    from = hit + 1;
  }
  return std::string_view::npos;
}

}  // namespace

Expected<CrashReport> parse_crash_report(std::string_view text) {
  // The input is bounded, so only allocation failure could throw; it must not
  // escape into the supervisor's collector.
  try {
    return parse_report_lines(text);
  } catch (const std::exception&) {
    return Error{"out of memory while parsing crash report"};
  }
}

std::vector<CrashReport> parse_crash_reports(std::string_view pipe_contents) {
  std::vector<CrashReport> reports;
  try {
    std::size_t start = find_line(pipe_contents, kHeader, 0);
    while (start != std::string_view::npos) {
      // A report runs from its header to its "end" line. Another header before
      // that means this one was cut short (its writer died mid-report); the
      // search for "end" stops there so hostile input cannot make it quadratic.
      const std::size_t body = start + kHeader.size();
      const std::size_t next = find_line(pipe_contents, kHeader, body);
      const std::string_view region = pipe_contents.substr(0, next);
      const std::size_t end = find_line(region, kEnd, body);
      if (end != std::string_view::npos) {
        auto report = parse_crash_report(region.substr(start, end + kEnd.size() - start));
        if (report) reports.push_back(std::move(*report));
      }
      start = next;
    }
  } catch (const std::exception&) {
    // Allocation failure: keep the reports parsed so far rather than throw.
  }
  return reports;
}

}  // namespace pillbox
