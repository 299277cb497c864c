// Uncaught-exception reports read from stderr: on the real output of the
// real interpreters (generated here, when the interpreter is installed), on
// the formats of versions not installed here, and on hostile text.
#include "supervisor/classify/traceback.h"

#include <fcntl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <doctest/doctest.h>

#include <cerrno>
#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <string>
#include <vector>

#include "supervisor/classify/classifier.h"
#include "supervisor/classify/exception_message.h"
#include "scratch_dir.h"
#include "tests/unit/cpu_clock.h"

namespace pillbox {
namespace {

// The first executable `name` in PATH (then in `extra`), or "".
std::string find_program(const std::string& name, const std::vector<std::string>& extra = {}) {
  std::vector<std::string> dirs;
  const char* path = std::getenv("PATH");
  std::string p = path != nullptr ? path : "/usr/bin:/bin";
  for (std::size_t start = 0; start <= p.size();) {
    const std::size_t end = std::min(p.find(':', start), p.size());
    if (end > start) dirs.push_back(p.substr(start, end - start));
    start = end + 1;
  }
  dirs.insert(dirs.end(), extra.begin(), extra.end());
  for (const std::string& dir : dirs) {
    const std::string candidate = dir + "/" + name;
    if (::access(candidate.c_str(), X_OK) == 0) return candidate;
  }
  return "";
}

struct Ran {
  int exit_code = -1;
  std::string err;
};

// Runs argv with stdout to /dev/null and returns its stderr and exit code.
Ran stderr_of(const std::vector<std::string>& argv) {
  int pipe_fds[2];
  REQUIRE(::pipe2(pipe_fds, O_CLOEXEC) == 0);
  const pid_t pid = ::fork();
  REQUIRE(pid >= 0);
  if (pid == 0) {
    const int null_fd = ::open("/dev/null", O_RDWR);
    ::dup2(null_fd, 0);
    ::dup2(null_fd, 1);
    ::dup2(pipe_fds[1], 2);
    std::vector<char*> args;
    for (const auto& a : argv) args.push_back(const_cast<char*>(a.c_str()));
    args.push_back(nullptr);
    ::execv(args[0], args.data());
    ::_exit(127);
  }
  ::close(pipe_fds[1]);
  Ran ran;
  char buf[4096];
  for (ssize_t n; (n = ::read(pipe_fds[0], buf, sizeof buf)) != 0;) {
    if (n < 0 && errno == EINTR) continue;
    REQUIRE(n > 0);
    ran.err.append(buf, static_cast<std::size_t>(n));
  }
  ::close(pipe_fds[0]);
  int status = 0;
  REQUIRE(::waitpid(pid, &status, 0) == pid);
  ran.exit_code = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
  return ran;
}

// What the classifier makes of an exec program that exited 1 with `err`.
Outcome classify_exit(const std::string& err, const std::string& identity = "exec interp parser {}") {
  Execution ex;
  ex.exec_mode = true;
  ex.handler_identity = identity;
  ex.payload_delivered = true;
  ExitReport exit;
  exit.pid = 4242;
  exit.wait_status = W_EXITCODE(1, 0);
  exit.stderr_tail = err;
  ex.exit = exit;
  Symbolizer symbolizer;
  return classify(ex, symbolizer);
}

// Three values that hit one raise site and one that hits another: one
// fingerprint for the three, another for the fourth; the message keeps the
// real value.
void check_sites(const std::vector<std::string>& argv_prefix, const std::string& expected_type,
                 const std::vector<std::string>& expected_state) {
  std::vector<std::string> fingerprints;
  for (const std::string value : {"abc", "it's", "x\"y\"42"}) {
    std::vector<std::string> argv = argv_prefix;
    argv.push_back(value);
    const Ran ran = stderr_of(argv);
    CAPTURE(ran.err);
    CHECK(ran.exit_code == 1);
    const auto tb = parse_traceback(ran.err);
    REQUIRE(tb.has_value());
    CHECK(tb->exception_type == expected_type);
    CHECK(traceback_state(*tb) == expected_state);
    const Outcome o = classify_exit(ran.err);
    CHECK(o.kind == Kind::kHandlerError);
    CHECK(o.crash_state == expected_state);
    CHECK_MESSAGE(o.message.find(value.substr(0, 1)) != std::string::npos, o.message);
    CHECK(o.stderr_tail == ran.err.substr(ran.err.size() - std::min<std::size_t>(ran.err.size(), 8192)));
    fingerprints.push_back(o.fingerprint);
  }
  CHECK(fingerprints[0] == fingerprints[1]);
  CHECK(fingerprints[0] == fingerprints[2]);
  std::vector<std::string> argv = argv_prefix;
  argv.push_back("other");
  const Ran other = stderr_of(argv);
  CAPTURE(other.err);
  const Outcome o = classify_exit(other.err);
  CHECK(o.kind == Kind::kHandlerError);
  CHECK(o.crash_state != expected_state);
  CHECK(o.fingerprint != fingerprints[0]);
}

TEST_CASE("traceback: real Python 3 tracebacks, one raise site is one fingerprint") {
  const std::string python = find_program("python3", {"/usr/bin", "/root/.pyenv/shims"});
  if (python.empty()) {
    MESSAGE("skipped: no python3 in PATH or /usr/bin (tools/setup.sh installs it)");
    return;
  }
  test::ScratchDir dir("traceback");
  // The raise site is reached through a chained exception (json fails
  // first), from the standard library's frames, and through a helper.
  const std::string script = dir.write("parser.py", R"py(import json, sys
def parse(x):
    raise ValueError(f"bad {x!r}")
def other_site(x):
    raise ValueError(f"bad {x!r}")
def main(x):
    try:
        json.loads(x)
    except Exception:
        if x == "other":
            other_site(x)
        parse(x)
main(sys.argv[1])
)py");
  check_sites({python, script}, "ValueError", {"ValueError", "parse (parser.py)", "main (parser.py)", "<module> (parser.py)"});

  // The first traceback of the chain is json's, inside the standard library.
  const Ran ran = stderr_of({python, script, "abc"});
  REQUIRE(ran.err.find("During handling of the above exception") != std::string::npos);
  const auto tb = parse_traceback(ran.err);
  REQUIRE(tb.has_value());
  CHECK(tb->language == "python");
  CHECK(tb->message == "bad 'abc'");
  REQUIRE(tb->frames.size() == 3);
  CHECK(tb->frames[0].function == "parse");
  CHECK(tb->frames[0].file == "parser.py");

  // The standard library's frames are skipped, like libc's in a native crash.
  const Ran stdlib = stderr_of({python, "-c", "import json\njson.loads('{')"});
  CAPTURE(stdlib.err);
  REQUIRE(stdlib.err.find("decoder.py") != std::string::npos);
  const auto in_stdlib = parse_traceback(stdlib.err);
  REQUIRE(in_stdlib.has_value());
  CHECK(in_stdlib->exception_type == "json.decoder.JSONDecodeError");
  CHECK(traceback_state(*in_stdlib) == std::vector<std::string>{"json.decoder.JSONDecodeError", "<module> (<string>)"});
  // Only the standard library's frames: they are the state, for want of others.
  Traceback only_stdlib = *in_stdlib;
  only_stdlib.frames.pop_back();
  const auto state = traceback_state(only_stdlib);
  REQUIRE(state.size() == 4);
  CHECK(state[1] == "raw_decode (decoder.py)");
}

TEST_CASE("traceback: real Node.js errors, caret block first, internal frames skipped") {
  const std::string node = find_program("node", {"/usr/bin"});
  if (node.empty()) {
    MESSAGE("skipped: no node in PATH or /usr/bin (tools/setup.sh installs nodejs)");
    return;
  }
  test::ScratchDir dir("traceback");
  const std::string script = dir.write("parser.js", R"js(function parse(x) { throw new TypeError(`bad ${JSON.stringify(x)}`); }
function otherSite(x) { throw new TypeError(`bad ${JSON.stringify(x)}`); }
[process.argv[2]].map((x) => x === "other" ? otherSite(x) : parse(x));
)js");
  check_sites({node, script}, "TypeError",
              {"TypeError", "parse (parser.js)", "<anonymous> (parser.js)", "Object.<anonymous> (parser.js)"});
  const Ran ran = stderr_of({node, script, "abc"});
  REQUIRE(ran.err.find("    at Array.map (<anonymous>)") != std::string::npos);
  REQUIRE(ran.err.find("node:internal/") != std::string::npos);
  const auto tb = parse_traceback(ran.err);
  REQUIRE(tb.has_value());
  CHECK(tb->language == "node");
  CHECK(tb->message == "bad \"abc\"");
}

TEST_CASE("traceback: real Java exceptions, the root cause's frames, reflection frames skipped") {
  const std::string java = find_program("java", {"/usr/bin"});
  if (java.empty()) {
    MESSAGE("skipped: no java in PATH or /usr/bin (tools/setup.sh installs default-jre-headless)");
    return;
  }
  test::ScratchDir dir("traceback");
  // Single-file source launch: the launcher's reflection frames are below main.
  const std::string script = dir.write("Parser.java", R"java(public class Parser {
  static int parse(String x) {
    try { return Integer.parseInt(x); }
    catch (NumberFormatException e) { throw new IllegalArgumentException("bad " + x, e); }
  }
  static int otherSite(String x) { throw new IllegalStateException("bad \"" + x + "\""); }
  public static void main(String[] args) {
    java.util.List.of(args[0]).forEach(x -> { if (x.equals("other")) otherSite(x); else parse(x); });
  }
}
)java");
  check_sites({java, script}, "java.lang.NumberFormatException",
              {"java.lang.NumberFormatException", "Parser.parse (Parser.java)", "Parser.lambda$main$0 (Parser.java)",
               "Parser.main (Parser.java)"});
  const Ran ran = stderr_of({java, script, "abc"});
  REQUIRE(ran.err.find("Caused by: java.lang.NumberFormatException") != std::string::npos);
  const auto tb = parse_traceback(ran.err);
  REQUIRE(tb.has_value());
  CHECK(tb->language == "java");
  CHECK(tb->message == "For input string: \"abc\"");
}

TEST_CASE("traceback: real Ruby errors, root cause first in the chain") {
  const std::string ruby = find_program("ruby", {"/usr/bin"});
  if (ruby.empty()) {
    MESSAGE("skipped: no ruby in PATH or /usr/bin (tools/setup.sh installs it)");
    return;
  }
  test::ScratchDir dir("traceback");
  const std::string script = dir.write("parser.rb", R"rb(def parse(x)
  raise ArgumentError, "bad #{x.inspect}"
end
def other_site(x)
  raise ArgumentError, "bad #{x.inspect}"
end
def main(x)
  raise "not a number" if x.to_i.zero?
rescue RuntimeError
  x == "other" ? other_site(x) : parse(x)
end
[ARGV[0]].each { |x| main(x) }
)rb");
  // The root cause is the RuntimeError raised in main, which every value hits;
  // the ArgumentError that propagated names the raise site, so check both.
  const Ran ran = stderr_of({ruby, script, "abc"});
  CAPTURE(ran.err);
  const auto tb = parse_traceback(ran.err);
  REQUIRE(tb.has_value());
  CHECK(tb->language == "ruby");
  CHECK(tb->exception_type == "RuntimeError");
  CHECK(tb->message == "not a number");
  REQUIRE(!tb->frames.empty());
  CHECK(tb->frames[0].file == "parser.rb");

  // Without a cause: the raise site itself.
  const std::string plain = dir.write("plain.rb", R"rb(def parse(x)
  raise ArgumentError, "bad #{x.inspect}"
end
def other_site(x)
  raise ArgumentError, "bad #{x.inspect}"
end
[ARGV[0]].each { |x| x == "other" ? other_site(x) : parse(x) }
)rb");
  const Ran probe = stderr_of({ruby, plain, "abc"});
  CAPTURE(probe.err);
  const auto first = parse_traceback(probe.err);
  REQUIRE(first.has_value());
  // Ruby before 3.4 names "block in <main>" and "each"; 3.4 "Array#each".
  std::vector<std::string> expected{"ArgumentError"};
  for (std::size_t i = 0; i < first->frames.size() && i < 3; ++i) {
    expected.push_back(first->frames[i].function + " (plain.rb)");
  }
  CHECK(expected[1] == (first->frames[0].function == "Object#parse" ? "Object#parse (plain.rb)" : "parse (plain.rb)"));
  check_sites({ruby, plain}, "ArgumentError", expected);
}

TEST_CASE("traceback: Ruby 3.4's straight quotes and Class#method names") {
  const auto tb = parse_traceback(
      "parser.rb:2:in 'Object#parse': bad \"zz\" (ArgumentError)\n"
      "\tfrom parser.rb:7:in 'block in <main>'\n"
      "\tfrom <internal:numeric>:257:in 'Integer#times'\n"
      "\tfrom /usr/lib/ruby/3.4.0/set.rb:500:in 'Set#each'\n"
      "\tfrom parser.rb:7:in 'Array#each'\n"
      "\tfrom parser.rb:7:in '<main>'\n");
  REQUIRE(tb.has_value());
  CHECK(tb->exception_type == "ArgumentError");
  CHECK(tb->message == "bad \"zz\"");
  CHECK(traceback_state(*tb) ==
        std::vector<std::string>{"ArgumentError", "Object#parse (parser.rb)", "block in <main> (parser.rb)",
                                 "Array#each (parser.rb)"});
  // A multi-line message: the class closes its first line.
  const auto multi = parse_traceback("t.rb:2:in `g': multi (RuntimeError)\nline 1\n\tfrom t.rb:4:in `<main>'\n");
  REQUIRE(multi.has_value());
  CHECK(multi->message == "multi");
  CHECK(traceback_state(*multi) == std::vector<std::string>{"RuntimeError", "g (t.rb)", "<main> (t.rb)"});
}

TEST_CASE("traceback: Java's '... N more' frames come from the enclosing exception") {
  const auto tb = parse_traceback(
      "Exception in thread \"main\" java.lang.RuntimeException: wrapped\n"
      "\tat com.x.App.run(App.java:20)\n"
      "\tat com.x.App.main(App.java:30)\n"
      "Caused by: java.io.IOException: bad 0x7f00 at /tmp/x/y\n"
      "\tat com.x.Reader.read(Reader.java:5)\n"
      "\t... 2 more\n"
      "\tSuppressed: java.lang.Exception: ignored\n"
      "\t\tat com.x.Other.close(Other.java:1)\n");
  REQUIRE(tb.has_value());
  CHECK(tb->exception_type == "java.io.IOException");
  CHECK(traceback_state(*tb) == std::vector<std::string>{"java.io.IOException", "com.x.Reader.read (Reader.java)",
                                                         "com.x.App.run (App.java)", "com.x.App.main (App.java)"});
}

TEST_CASE("exception_message_key: per-payload values normalized, the words kept") {
  CHECK(exception_message_key("bad 'abc'") == exception_message_key("bad \"it's\""));
  CHECK(exception_message_key("bad 'abc'") == "bad '?'");
  CHECK(exception_message_key("bad b'\\x00\\'' at 12") == "bad b'?' at N");
  CHECK(exception_message_key("can't parse 'x'") == "can't parse '?'");
  CHECK(exception_message_key("object at 0x7f3a2b1c") == "object at 0xX");
  CHECK(exception_message_key("no file /tmp/pillbox-AbC12/in.txt here") == "no file <tmp> here");
  CHECK(exception_message_key("open(/var/tmp/q) failed") == "open(<tmp>) failed");
  CHECK(exception_message_key("reading /proc/self/fd/3: bad") == "reading <payload>: bad");
  CHECK(exception_message_key("in /scratch/job7/x", {"/scratch"}) == "in <tmp>");
  CHECK(exception_message_key("/tmpfoo/x") == "/tmpfoo/x");  // not a temp dir, digits aside
  CHECK(exception_message_key("first line\nsecond 'x'") == "first line");
  CHECK(exception_message_key("unterminated 'quote") == "unterminated 'quote");
  CHECK(exception_message_key(std::string(100000, '\'')).size() <= 200);
}

// ---- hostile text ---------------------------------------------------------------

TEST_CASE("traceback: hostile stderr: bounded work, no crash, only the tail read") {
  SUBCASE("a million frames") {
    std::string text = "Traceback (most recent call last):\n";
    for (int i = 0; i < 1'000'000; ++i) text += "  File \"/x/p.py\", line 1, in f\n";
    text += "RecursionError: maximum recursion depth exceeded\n";
    const double start = pillbox::test::thread_cpu_seconds();  // CPU, not wall: see cpu_clock.h
    const auto tb = parse_traceback(text);
    const double took = pillbox::test::thread_cpu_seconds() - start;
    // The marker is out of the tail: nothing to read (the tail holds frames only).
    CHECK_FALSE(tb.has_value());
    CHECK(took < 1.0);
  }
  SUBCASE("a million Node frames and Java frames") {
    std::string node = "Error: x\n", java = "Exception in thread \"main\" java.lang.Error: x\n";
    for (int i = 0; i < 1'000'000; ++i) {
      node += "    at f (/x/a.js:1:1)\n";
      java += "\tat A.f(A.java:1)\n";
    }
    CHECK_FALSE(parse_traceback(node).has_value());  // its header is out of the tail
    CHECK_FALSE(parse_traceback(java).has_value());
  }
  SUBCASE("frames up to the cap within the tail") {
    std::string text = "Traceback (most recent call last):\n";
    for (int i = 0; i < 300; ++i) text += "  File \"a\", line 1, in f\n";
    text += "E: x\n";
    const auto tb = parse_traceback(text);
    REQUIRE(tb.has_value());
    CHECK(tb->frames.size() <= kMaxTraceFrames);
  }
  SUBCASE("one gigantic line, invalid UTF-8, NULs") {
    std::string text(50 << 20, 'A');
    text += "\xff\xfe\x80";
    text += std::string(5, '\0');
    CHECK_FALSE(parse_traceback(text).has_value());
    std::string bad = "Traceback (most recent call last):\n  File \"\xff\xfe.py\", line 1, in \x80\x81\nV\xff" "E: \xc3\n";
    CHECK_FALSE(parse_traceback(bad).has_value());  // "V\xffE" is no type name
    bad = "Traceback (most recent call last):\n  File \"\xff\xfe.py\", line 1, in \x80\x81\nValueError: \xc3\x28\n";
    const auto tb = parse_traceback(bad);
    REQUIRE(tb.has_value());
    CHECK(tb->frames.at(0).function == "\x80\x81");
    const Outcome o = classify_exit(bad);
    CHECK(o.fingerprint.size() == 20);
  }
  SUBCASE("nested and unfinished markers") {
    std::string text;
    for (int i = 0; i < 2000; ++i) text += "Traceback (most recent call last):\n";
    CHECK_FALSE(parse_traceback(text).has_value());
    text = "Traceback (most recent call last):\n  File \"a.py\", line 1, in f\n";  // cut before its exception
    CHECK_FALSE(parse_traceback(text).has_value());
    text = "Caused by: x.Y: z\n\tat A.b(A.java:1)\n";
    for (int i = 0; i < 3000; ++i) text += "Caused by: x.Y: z\n";
    CHECK_NOTHROW(parse_traceback(text));
    text = "\t... 99999999999999999999 more\nException in thread \"m\" x.Y\n\tat A.b(A.java:1)\n\t... 99999999999999999999 more\n";
    CHECK_NOTHROW(parse_traceback(text));
    text = std::string(8000, '(') + ")";
    CHECK_FALSE(parse_traceback(text).has_value());
    text = "x.rb:1:in `" + std::string(8000, '\'') + ": m (E)\n";
    CHECK_NOTHROW(parse_traceback(text));
  }
  SUBCASE("a frame's file is a base name, whatever its parentheses hold (found by fuzz/traceback_fuzzer.cpp)") {
    const auto tb = parse_traceback("Exception in thread \"main\" x.Y: z\n"
                                    "\tat a.B.run(Maia/se/x.Y.c(Main.java:419)\n");
    REQUIRE(tb.has_value());
    CHECK(tb->frames.at(0).file == "x.Y.c(Main.java");
  }
  SUBCASE("a fake traceback names only its own failure: the handler is in the fingerprint") {
    const std::string fake = "Traceback (most recent call last):\n  File \"p.py\", line 1, in f\nValueError: x\n";
    CHECK(classify_exit(fake, "exec a").fingerprint != classify_exit(fake, "exec b").fingerprint);
  }
}

}  // namespace
}  // namespace pillbox
