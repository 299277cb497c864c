#include "shared/crash_report.h"

#include <doctest/doctest.h>

#include <cstdint>
#include <string>

namespace pillbox {
namespace {

const std::string kValid =
    "pillbox-crash 1\n"
    "pid 1234\n"
    "signal 11\n"
    "code 1\n"
    "addr 0x0\n"
    "pc 0x55d0c0a01139\n"
    "sp 0x7ffd2c1f0a40\n"
    "syscall -1\n"
    "arch 0\n"
    "stack_fault 0\n"
    "frame /usr/bin/prog 0x1139\n"
    "frame /lib/x86_64-linux-gnu/libc.so.6 0x27d8a\n"
    "frame /opt/my apps/with space.so 0x10\n"
    "frame  0x7f0012345678\n"
    "end\n";

// Replaces the first line starting with `key ` in kValid by `replacement`.
std::string with_line(const std::string& key, const std::string& replacement) {
  std::string text = kValid;
  const std::size_t at = text.find("\n" + key + " ") + 1;
  const std::size_t end = text.find('\n', at);
  text.replace(at, end - at, replacement);
  return text;
}

std::string with_extra_line(const std::string& line) {
  std::string text = kValid;
  text.insert(text.find("end\n"), line + "\n");
  return text;
}

TEST_CASE("crash report: a valid report parses completely") {
  const auto report = parse_crash_report(kValid);
  REQUIRE_MESSAGE(report.has_value(), report.error());
  CHECK(report->pid == 1234);
  CHECK(report->signal == 11);
  CHECK(report->code == 1);
  CHECK(report->addr == 0);
  CHECK(report->pc == 0x55d0c0a01139);
  CHECK(report->sp == 0x7ffd2c1f0a40);
  CHECK(report->syscall == -1);
  CHECK(report->arch == 0);
  CHECK_FALSE(report->stack_fault);
  REQUIRE(report->frames.size() == 4);
  CHECK(report->frames[0].module == "/usr/bin/prog");
  CHECK(report->frames[0].offset == 0x1139);
  CHECK(report->frames[1].module == "/lib/x86_64-linux-gnu/libc.so.6");
  CHECK(report->frames[1].offset == 0x27d8a);
  CHECK(report->frames[2].module == "/opt/my apps/with space.so");
  CHECK(report->frames[2].offset == 0x10);
  CHECK(report->frames[3].module == "");
  CHECK(report->frames[3].offset == 0x7f0012345678);
}

TEST_CASE("crash report: seccomp fields, extremes and optional parts") {
  const std::string text =
      "pillbox-crash 1\n"
      "pid 2147483647\n"
      "signal 31\n"
      "code -6\n"
      "addr 0xFFFFFFFFFFFFFFFF\n"
      "syscall 41\n"
      "arch 3221225534\n"
      "stack_fault 1\n"
      "frame 0x42\n"
      "end";  // the final newline is optional
  const auto report = parse_crash_report(text);
  REQUIRE_MESSAGE(report.has_value(), report.error());
  CHECK(report->pid == 2147483647);
  CHECK(report->code == -6);
  CHECK(report->addr == UINT64_MAX);
  CHECK(report->pc == 0);  // absent fields keep their defaults
  CHECK(report->syscall == 41);
  CHECK(report->arch == 0xc000003eu);  // AUDIT_ARCH_X86_64
  CHECK(report->stack_fault);
  REQUIRE(report->frames.size() == 1);
  CHECK(report->frames[0].module == "");
  CHECK(report->frames[0].offset == 0x42);

  const auto no_frames = parse_crash_report("pillbox-crash 1\npid 1\nsignal 6\nend\n");
  REQUIRE(no_frames.has_value());
  CHECK(no_frames->frames.empty());
}

TEST_CASE("crash report: rejections") {
  auto rejected = [](const std::string& text) { return !parse_crash_report(text).has_value(); };

  SUBCASE("header and end") {
    CHECK(rejected(""));
    CHECK(rejected(kValid.substr(kValid.find('\n') + 1)));          // no header
    CHECK(rejected("pillbox-crash 2" + kValid.substr(15)));         // unknown version
    CHECK(rejected("garbage\n" + kValid));                          // header not first
    CHECK(rejected(kValid.substr(0, kValid.size() - 4)));           // no end
    CHECK(rejected(kValid + "pid 5\n"));                            // data after end
    CHECK(rejected(kValid + "\n"));
    CHECK(rejected("pillbox-crash 1\r\npid 1\r\nsignal 6\r\nend\r\n"));
  }
  SUBCASE("required fields") {
    CHECK(rejected("pillbox-crash 1\nsignal 6\nend\n"));
    CHECK(rejected("pillbox-crash 1\npid 1\nend\n"));
  }
  SUBCASE("unknown keys and malformed lines") {
    CHECK(rejected(with_extra_line("color blue")));
    CHECK(rejected(with_extra_line("PID 12")));
    CHECK(rejected(with_extra_line("")));
    CHECK(rejected(with_extra_line("pid")));
    CHECK(rejected(with_extra_line("end 1")));
  }
  SUBCASE("duplicated scalar keys") {
    for (const char* line : {"pid 1234", "signal 11", "code 1", "addr 0x0", "pc 0x1", "sp 0x1",
                             "syscall -1", "arch 0", "stack_fault 0"}) {
      CAPTURE(line);
      CHECK(rejected(with_extra_line(line)));
    }
  }
  SUBCASE("numbers out of range or malformed") {
    CHECK(rejected(with_line("pid", "pid 0")));
    CHECK(rejected(with_line("pid", "pid -5")));
    CHECK(rejected(with_line("pid", "pid 2147483648")));
    CHECK(rejected(with_line("signal", "signal 0")));
    CHECK(rejected(with_line("signal", "signal 65")));
    CHECK(rejected(with_line("code", "code 2147483648")));
    CHECK(rejected(with_line("code", "code -2147483649")));
    CHECK(rejected(with_line("syscall", "syscall -2")));
    CHECK(rejected(with_line("arch", "arch 4294967296")));
    CHECK(rejected(with_line("stack_fault", "stack_fault 2")));
    CHECK(rejected(with_line("addr", "addr 0x10000000000000000")));  // 17 hex digits
    CHECK(rejected(with_line("addr", "addr 18446744073709551616")));
    CHECK(rejected(with_line("addr", "addr -1")));
    CHECK(rejected(with_line("pc", "pc 0x")));
    CHECK(rejected(with_line("pc", "pc 0xg1")));
    CHECK(rejected(with_line("pc", "pc 12a")));
    CHECK(rejected(with_line("pc", "pc +1")));
    CHECK(rejected(with_line("pc", "pc  1")));
    CHECK(rejected(with_line("pc", "pc 1 ")));
    CHECK(rejected(with_line("pc", "pc ")));
    CHECK(rejected(with_line("signal", "signal -")));
  }
  SUBCASE("frames") {
    CHECK(rejected(with_extra_line("frame")));
    CHECK(rejected(with_extra_line("frame /usr/bin/prog")));
    CHECK(rejected(with_extra_line("frame /usr/bin/prog 0xzz")));
    CHECK(rejected(with_extra_line("frame /usr/bin/prog -1")));
    CHECK(rejected(with_extra_line("frame /usr/bin/\x01prog 0x1")));
    CHECK(rejected(with_extra_line("frame /usr/bin/\x7fprog 0x1")));
    CHECK(rejected(with_extra_line("frame /usr/bin/\tprog 0x1")));
    CHECK(rejected(with_extra_line("frame /" + std::string(4096, 'a') + " 0x1")));
    CHECK_FALSE(rejected(with_extra_line("frame " + std::string(4096, 'a') + " 0x1")));
  }
  SUBCASE("frame count cap") {
    std::string text = "pillbox-crash 1\npid 1\nsignal 11\n";
    for (std::size_t i = 0; i < kMaxCrashFrames; ++i) text += "frame /bin/x 0x" + std::to_string(i + 1) + "\n";
    CHECK_FALSE(rejected(text + "end\n"));
    CHECK(rejected(text + "frame /bin/x 0x99\nend\n"));
  }
  SUBCASE("size cap") {
    std::string text = "pillbox-crash 1\npid 1\nsignal 11\n";
    while (text.size() <= kMaxCrashReportBytes) text += "frame /" + std::string(1000, 'b') + " 0x1\n";
    CHECK(rejected(text + "end\n"));
  }
  SUBCASE("embedded NUL bytes") {
    std::string text = kValid;
    text[text.find("pid 1234") + 4] = '\0';
    CHECK(rejected(text));
  }
}

TEST_CASE("crash reports: several in one pipe, with garbage between") {
  const std::string second =
      "pillbox-crash 1\npid 77\nsignal 6\nframe /bin/child 0x20\nend\n";
  const std::string truncated = "pillbox-crash 1\npid 99\nsignal 11\nframe /bin/x 0x";
  const std::string malformed = "pillbox-crash 1\npid 5\nsignal 11\nhello world\nend\n";
  const std::string pipe = "\x01\x02 binary junk\nend\n" + kValid + "some garbage line\n" + truncated + "\n" +
                           second + malformed + "trailing pillbox-crash 1\nend\n" + second.substr(0, 30);

  const auto reports = parse_crash_reports(pipe);
  REQUIRE(reports.size() == 2);
  CHECK(reports[0].pid == 1234);
  CHECK(reports[0].frames.size() == 4);
  CHECK(reports[1].pid == 77);
  REQUIRE(reports[1].frames.size() == 1);
  CHECK(reports[1].frames[0].module == "/bin/child");

  CHECK(parse_crash_reports("").empty());
  CHECK(parse_crash_reports("pillbox-crash 1").empty());
  CHECK(parse_crash_reports(kValid + kValid).size() == 2);
  // Back-to-back reports without a final newline.
  CHECK(parse_crash_reports(kValid + second.substr(0, second.size() - 1)).size() == 2);
}

TEST_CASE("crash reports: many headers without an end stay fast and empty") {
  std::string pipe;
  for (int i = 0; i < 100000; ++i) pipe += "pillbox-crash 1\n";
  pipe += "end\n";
  // Only the last header is followed by "end", and it has no pid: nothing parses.
  CHECK(parse_crash_reports(pipe).empty());
}

// Deterministic xorshift so every run exercises the same mutations.
struct Rng {
  std::uint64_t state = 0x9e3779b97f4a7c15ull;
  std::uint64_t next() {
    state ^= state << 13;
    state ^= state >> 7;
    state ^= state << 17;
    return state;
  }
  std::size_t below(std::size_t n) { return static_cast<std::size_t>(next() % n); }
};

TEST_CASE("crash report: mutated and truncated input never breaks the parser") {
  Rng rng;
  static constexpr char kInteresting[] = {'\n', ' ', '0', 'x', '-', '9', 'f', '\0', '\x7f', '\xff'};
  int parsed = 0;
  for (int round = 0; round < 5000; ++round) {
    std::string text = kValid;
    const int edits = 1 + static_cast<int>(rng.below(4));
    for (int e = 0; e < edits && !text.empty(); ++e) {
      const std::size_t at = rng.below(text.size());
      switch (rng.below(5)) {
        case 0: text[at] = static_cast<char>(rng.next()); break;
        case 1: text[at] = kInteresting[rng.below(sizeof kInteresting)]; break;
        case 2: text.erase(at, 1 + rng.below(8)); break;
        case 3: {  // duplicate a slice; two statements fix the order of the rng calls
          const std::size_t from = rng.below(text.size());
          text.insert(at, text.substr(from, rng.below(40)));
          break;
        }
        case 4: text.resize(at); break;
      }
    }
    const auto report = parse_crash_report(text);
    if (report) {
      ++parsed;
      CHECK(report->signal >= 1);
      CHECK(report->signal <= 64);
      CHECK(report->pid >= 1);
      CHECK(report->frames.size() <= kMaxCrashFrames);
    }
    for (const CrashReport& r : parse_crash_reports(text + text)) {
      CHECK(r.frames.size() <= kMaxCrashFrames);
    }
  }
  // Some mutations (a changed hex digit) keep the report valid; most do not.
  CHECK(parsed > 0);
  CHECK(parsed < 5000);
}

}  // namespace
}  // namespace pillbox
