// Progress you can read (issue 14): on a terminal, run, quarantine replay,
// reproduce, minimize, fuzz and quarantine import draw a line in place with
// done/total, the rate, the ETA and failures by kind; per-task lines printed
// on the same terminal never land on it; nothing on a pipe or with --quiet.
// pillbox runs here on a real pseudo-terminal (forkpty), stdout and stderr
// both on it, as under an operator's shell.
#include <doctest/doctest.h>
#include <fcntl.h>
#include <poll.h>
#include <pty.h>
#include <signal.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <termios.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstring>
#include <filesystem>
#include <string>
#include <nlohmann/json.hpp>
#include <vector>

#include "tests/e2e/support.h"

using e2e::run_pillbox;
using e2e::task_line;

namespace {

// Erase the line and go back to its start: how a progress line is drawn.
constexpr const char* kErase = "\r\x1b[K";

struct PtyRun {
  int exit_code = -1;
  std::string screen;  // every byte pillbox wrote to the terminal, stdout and stderr
};

// Runs pillbox with `args` on a new pseudo-terminal `columns` wide (its
// stderr, its stdout unless `stdout_file` is given, its stdin unless
// `stdin_file` is), reads
// everything it writes until it has exited, and fails the test after
// `deadline_s`.
// `stdout_file`: stdout goes there instead (stderr stays the terminal).
PtyRun run_on_pty(const std::vector<std::string>& args, unsigned short columns = 200,
                  const std::string& stdin_file = "", const std::string& stdout_file = "", int deadline_s = 240) {
  const std::string binary = e2e::pillbox_binary();
  std::vector<std::string> argv_text = {binary};
  argv_text.insert(argv_text.end(), args.begin(), args.end());
  std::vector<char*> argv;
  for (auto& a : argv_text) argv.push_back(a.data());
  argv.push_back(nullptr);
  struct winsize ws {};
  ws.ws_row = 50;
  ws.ws_col = columns;
  int master = -1;
  const pid_t pid = ::forkpty(&master, nullptr, nullptr, &ws);
  REQUIRE_MESSAGE(pid >= 0, "forkpty: " << std::strerror(errno));
  if (pid == 0) {
    if (!stdin_file.empty()) {
      const int fd = ::open(stdin_file.c_str(), O_RDONLY | O_CLOEXEC);
      if (fd < 0 || ::dup2(fd, STDIN_FILENO) < 0) _exit(126);
    }
    if (!stdout_file.empty()) {
      const int fd = ::open(stdout_file.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
      if (fd < 0 || ::dup2(fd, STDOUT_FILENO) < 0) _exit(126);
    }
    ::execv(binary.c_str(), argv.data());
    _exit(127);
  }
  // A pidfd becomes readable when pillbox ends; the master, when it writes.
  const int pidfd = static_cast<int>(::syscall(SYS_pidfd_open, pid, 0));
  REQUIRE_MESSAGE(pidfd >= 0, "pidfd_open: " << std::strerror(errno));
  PtyRun run;
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(deadline_s);
  bool exited = false;
  for (;;) {
    const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - std::chrono::steady_clock::now());
    if (left.count() <= 0) {
      ::kill(pid, SIGKILL);
      FAIL("pillbox ran longer than " << deadline_s << " s on the terminal; it wrote:\n" << run.screen);
    }
    struct pollfd fds[2] = {{master, POLLIN, 0}, {pidfd, POLLIN, 0}};
    const int n = ::poll(fds, exited ? 1 : 2, exited ? 0 : static_cast<int>(left.count()));
    if (n < 0 && errno == EINTR) continue;
    REQUIRE(n >= 0);
    if (!exited && (fds[1].revents & POLLIN) != 0) exited = true;
    if ((fds[0].revents & (POLLIN | POLLHUP | POLLERR)) != 0) {
      char buf[4096];
      const ssize_t got = ::read(master, buf, sizeof buf);
      if (got > 0) {
        run.screen.append(buf, static_cast<std::size_t>(got));
        continue;
      }
      if (got < 0 && errno == EINTR) continue;
      break;  // EIO: nothing holds the terminal any more
    }
    if (exited && n == 0) break;  // gone, and all it wrote has been read
  }
  int status = 0;
  REQUIRE(::waitpid(pid, &status, 0) == pid);
  ::close(pidfd);
  ::close(master);
  run.exit_code = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
  return run;
}

// What stays visible of each line of `screen`: the text after the last
// "erase the line" on it (a terminal shows nothing of what was erased).
std::vector<std::string> visible_lines(const std::string& screen) {
  std::vector<std::string> lines;
  std::size_t start = 0;
  while (start <= screen.size()) {
    std::size_t nl = screen.find('\n', start);
    if (nl == std::string::npos) nl = screen.size();
    std::string line = screen.substr(start, nl - start);
    const std::size_t erased = line.rfind(kErase);
    if (erased != std::string::npos) line = line.substr(erased + std::strlen(kErase));
    while (!line.empty() && line.back() == '\r') line.pop_back();
    if (!line.empty()) lines.push_back(line);
    start = nl + 1;
  }
  return lines;
}

// The lines drawn in place whose text starts with `label` ("run: ").
std::vector<std::string> drawn_lines(const std::string& screen, const std::string& label) {
  std::vector<std::string> drawn;
  for (std::size_t at = screen.find(kErase); at != std::string::npos; at = screen.find(kErase, at + 1)) {
    const std::size_t from = at + std::strlen(kErase);
    std::size_t end = screen.find_first_of("\r\n", from);
    if (end == std::string::npos) end = screen.size();
    const std::string line = screen.substr(from, end - from);
    if (line.rfind(label, 0) == 0) drawn.push_back(line);
  }
  return drawn;
}

bool contains(const std::string& text, const std::string& part) { return text.find(part) != std::string::npos; }

bool any_contains(const std::vector<std::string>& lines, const std::string& part) {
  for (const auto& l : lines) {
    if (contains(l, part)) return true;
  }
  return false;
}

// A directory of inputs for poison_corpus: `slow` that backtrack until the
// wall-clock limit (--timeout), `crash` that crash, `ok` that succeed. Sorted by name, the slow
// ones come first, so the run is still going when the first verdicts come.
void write_inputs(const e2e::TempDir& dir, int slow, int crash, int ok) {
  std::filesystem::create_directories(dir.file("in"));
  for (int i = 0; i < slow; ++i) dir.write("in/a-slow-" + std::to_string(i), "R" + std::string(40, 'a') + "!");
  for (int i = 0; i < crash; ++i) dir.write("in/b-crash-" + std::to_string(i), "S " + std::to_string(i));
  for (int i = 0; i < ok; ++i) dir.write("in/c-ok-" + std::to_string(i), "fine " + std::to_string(i));
}

// `n` records that crash under the poison plugin (quarantined at once).
std::string quarantined_store(const e2e::TempDir& dir, int n) {
  const std::string store = dir.path() + "/store";
  std::string input;
  for (int i = 0; i < n; ++i) input += task_line("segv-" + std::to_string(i), "S payload " + std::to_string(i));
  const auto run = run_pillbox({"run", "--store", store, "--handler", e2e::poison_plugin(), "--max-attempts", "1",
                                "--no-breaker", "--jobs", "2", "-"},
                               input);
  INFO(run.describe());
  REQUIRE(e2e::sql_int(store + "/pillbox.db", "SELECT count(*) FROM quarantine") == n);
  return store;
}

}  // namespace

TEST_CASE("progress: run on a terminal shows done/total, rate, ETA and failures by kind, task lines above it") {
  e2e::TempDir dir;
  e2e::TempDir markers(01777);
  write_inputs(dir, 3, 2, 3);
  const auto r = run_on_pty({"run", "--no-store", "--max-attempts", "1", "--no-breaker", "--jobs", "1", "--timeout",
                             "400ms", dir.path() + "/in", "--", e2e::fixture("poison_corpus"), markers.path()});
  INFO(r.screen);
  CHECK(r.exit_code == 1);
  const auto drawn = drawn_lines(r.screen, "run: [");
  REQUIRE(!drawn.empty());
  // While it runs: a bar, done of the 8 inputs, the rate and the ETA.
  CHECK(any_contains(drawn, "/8  "));
  CHECK(any_contains(drawn, "/s"));
  CHECK(any_contains(drawn, "ETA "));
  CHECK(any_contains(drawn, "wall-timeout"));
  // The last state stays: all done, failures by kind.
  const auto lines = visible_lines(r.screen);
  std::size_t final_lines = 0;
  for (const auto& l : lines) {
    if (l.rfind("run: [########################] 8/8", 0) == 0) {
      ++final_lines;
      CHECK(contains(l, "3 wall-timeout, 2 crash"));
      CHECK_FALSE(contains(l, "ETA"));
    }
  }
  CHECK(final_lines == 1);
  // Every task line is on a line of its own: never after a progress line.
  for (const std::string key : {"a-slow-0", "a-slow-2", "b-crash-1", "c-ok-2"}) {
    bool shown = false;
    for (const auto& l : lines) {
      if (!contains(l, key)) continue;
      shown = true;
      CHECK_MESSAGE(l.rfind("run: ", 0) != 0, "task line drawn over by the progress line: " << l);
    }
    CHECK_MESSAGE(shown, key);
  }
}

TEST_CASE("progress: run reading JSON lines on stdin has no total: counts and the rate, no bar") {
  e2e::TempDir dir;
  const std::string input = dir.write("tasks.jsonl", task_line("one", "S x") + task_line("two", "fine"));
  // stdin from the file, stdout and stderr the terminal.
  const auto r = run_on_pty({"run", "--no-store", "--handler", e2e::poison_plugin(), "--max-attempts", "1",
                             "--no-breaker", "-"},
                            200, input);
  INFO(r.screen);
  CHECK(r.exit_code == 1);
  const auto drawn = drawn_lines(r.screen, "run: ");
  REQUIRE(!drawn.empty());
  CHECK(drawn.back().rfind("run: 2  ", 0) == 0);
  CHECK(contains(drawn.back(), "/s"));
  CHECK(contains(drawn.back(), "1 crash"));
  CHECK_FALSE(contains(drawn.back(), "["));
  CHECK_FALSE(contains(drawn.back(), "ETA"));
}

TEST_CASE("progress: with stdout in a file, the line is on the terminal and the file gets clean JSON lines") {
  e2e::TempDir dir;
  e2e::TempDir markers(01777);
  write_inputs(dir, 1, 1, 2);
  const std::string out = dir.file("out.jsonl");
  const auto r = run_on_pty({"run", "--json", "--no-store", "--max-attempts", "1", "--no-breaker", "--jobs", "1",
                             "--timeout", "400ms", dir.path() + "/in", "--", e2e::fixture("poison_corpus"),
                             markers.path()},
                            200, "", out);
  INFO(r.screen);
  CHECK(r.exit_code == 1);
  const auto drawn = drawn_lines(r.screen, "run: [");
  REQUIRE(!drawn.empty());
  CHECK(drawn.back().rfind("run: [########################] 4/4", 0) == 0);
  const std::string json = e2e::read_file(out);
  CHECK(json.find('\x1b') == std::string::npos);
  CHECK(json.find('\r') == std::string::npos);
  std::size_t records = 0;
  for (std::size_t start = 0, nl; (nl = json.find('\n', start)) != std::string::npos; start = nl + 1) {
    CHECK(nlohmann::json::accept(json.substr(start, nl - start)));
    ++records;
  }
  CHECK(records == 4);
}

TEST_CASE("progress: a resumed run counts the inputs the store already has as skipped, toward the total") {
  e2e::TempDir dir;
  std::filesystem::create_directories(dir.file("in"));
  dir.write("in/one", "fine 1");
  dir.write("in/two", "fine 2");
  dir.write("in/three", "S crash");
  const std::string store = dir.path() + "/store";
  const std::vector<std::string> run = {"run", "--store", store, "--handler", e2e::poison_plugin(),
                                        "--max-attempts", "1", "--no-breaker", dir.path() + "/in"};
  const auto first = run_pillbox(run);
  INFO(first.describe());
  REQUIRE(first.exit_code == 1);
  const auto again = run_on_pty(run);
  INFO(again.screen);
  const auto drawn = drawn_lines(again.screen, "run: [");
  REQUIRE(!drawn.empty());
  CHECK(drawn.back().rfind("run: [########################] 3/3", 0) == 0);
  CHECK(contains(drawn.back(), "3 skipped"));
  CHECK_FALSE(contains(drawn.back(), "crash"));  // nothing ran, nothing failed this time
}

TEST_CASE("progress: nothing on a pipe, nothing with --quiet on a terminal") {
  e2e::TempDir dir;
  e2e::TempDir markers(01777);
  write_inputs(dir, 1, 1, 1);
  const std::vector<std::string> run = {"run", "--no-store", "--max-attempts", "1", "--no-breaker", "--jobs", "1",
                                        "--timeout", "400ms", dir.path() + "/in", "--", e2e::fixture("poison_corpus"),
                                        markers.path()};
  const auto piped = run_pillbox(run);
  INFO(piped.describe());
  CHECK(piped.exit_code == 1);
  CHECK_FALSE(contains(piped.err, "\x1b["));
  CHECK_FALSE(contains(piped.err, "run: ["));
  CHECK_FALSE(contains(piped.err, "elapsed"));

  std::vector<std::string> quiet = run;
  quiet.insert(quiet.begin() + 1, "--quiet");
  const auto r = run_on_pty(quiet);
  INFO(r.screen);
  CHECK(r.exit_code == 1);
  CHECK_FALSE(contains(r.screen, "\x1b["));
  CHECK_FALSE(contains(r.screen, "run: ["));
  CHECK_FALSE(contains(r.screen, "elapsed"));
}

TEST_CASE("progress: nothing on a pipe however long the run (no log line every few seconds)") {
  // One task that sleeps until its 5.5 s wall-clock limit: longer than the
  // period of the log lines progress used to print when stderr was no terminal.
  e2e::TempDir dir;
  std::filesystem::create_directories(dir.file("in"));
  dir.write("in/sleeper", "z");
  const auto piped = run_pillbox({"run", "--no-store", "--max-attempts", "1", "--timeout", "5500ms",
                                  dir.path() + "/in", "--", e2e::fixture("sleep_forever")});
  INFO(piped.describe());
  CHECK(piped.exit_code == 1);
  CHECK_FALSE(contains(piped.err, "run: 1"));
  CHECK_FALSE(contains(piped.err, "elapsed"));
}

TEST_CASE("progress: replay, reproduce and minimize show done/total, the rate and the failures by kind") {
  e2e::TempDir dir;
  const std::string store = quarantined_store(dir, 3);

  const auto replay = run_on_pty({"quarantine", "replay", "--kind", "crash", "--store", store, "--handler", e2e::poison_plugin()});
  INFO(replay.screen);
  CHECK(replay.exit_code == 1);  // they crash again
  CHECK(any_contains(visible_lines(replay.screen), "replay: [########################] 3/3"));
  CHECK(any_contains(drawn_lines(replay.screen, "replay: "), "3 crash"));
  CHECK(any_contains(drawn_lines(replay.screen, "replay: "), "/s"));

  const auto reproduce = run_on_pty({"reproduce", "1", "--runs", "12", "--jobs", "2", "--store", store, "--handler", e2e::poison_plugin()});
  INFO(reproduce.screen);
  CHECK(reproduce.exit_code == 0);
  const auto lines = drawn_lines(reproduce.screen, "reproduce 1: [");
  REQUIRE(!lines.empty());
  CHECK(contains(lines.back(), "12/12"));
  CHECK(contains(lines.back(), "12 crash"));
  CHECK(contains(lines.back(), "/s"));

  const auto minimize = run_on_pty({"minimize", "2", "--max-runs", "40", "--store", store, "--handler", e2e::poison_plugin()});
  INFO(minimize.screen);
  CHECK(minimize.exit_code == 0);
  const auto shrinking = drawn_lines(minimize.screen, "minimize 2: [");
  REQUIRE(!shrinking.empty());
  CHECK(contains(shrinking.back(), "/40"));
  CHECK(contains(shrinking.back(), "best "));
}

TEST_CASE("progress: fuzz against its run budget, and import of artifacts, with failures by kind") {
  e2e::TempDir dir;
  const std::string store = dir.path() + "/store";
  std::filesystem::create_directories(dir.file("seeds"));
  std::filesystem::create_directories(dir.file("artifacts"));
  dir.write("seeds/crasher", "S seed");
  dir.write("seeds/fine", "hello, fuzzer");
  const auto fuzz = run_on_pty({"fuzz", dir.path() + "/seeds", "--max-runs", "60", "--seed", "3", "--handler", e2e::poison_plugin(),
                                "--store", store});
  INFO(fuzz.screen);
  const auto fuzzing = drawn_lines(fuzz.screen, "fuzz: [");
  REQUIRE(!fuzzing.empty());
  CHECK(contains(fuzzing.back(), "60/60"));
  CHECK(contains(fuzzing.back(), "crash"));
  CHECK(contains(fuzzing.back(), "/s"));

  // Against --max-time alone: the bar and the ETA follow the clock.
  const auto timed = run_on_pty({"fuzz", dir.path() + "/seeds", "--max-time", "2s", "--jobs", "1", "--seed", "4",
                                 "--handler", e2e::poison_plugin(), "--store", store});
  INFO(timed.screen);
  const auto ticking = drawn_lines(timed.screen, "fuzz: [");
  REQUIRE(ticking.size() >= 2);
  CHECK(any_contains(ticking, "ETA "));
  CHECK(ticking.back().rfind("fuzz: [########################] ", 0) == 0);

  dir.write("artifacts/crash-0123456789abcdef0123456789abcdef01234567", "S from libFuzzer");
  dir.write("artifacts/crash-89abcdef0123456789abcdef0123456789abcdef", "A from libFuzzer");
  dir.write("artifacts/timeout-0123456789abcdef0123456789abcdef01234567", "fine");
  const std::string store2 = dir.path() + "/store2";
  const auto imported = run_on_pty({"quarantine", "import", dir.path() + "/artifacts", "--handler",
                                    e2e::poison_plugin(), "--store", store2});
  INFO(imported.screen);
  CHECK(imported.exit_code == 1);  // one runs ok here
  const auto importing = drawn_lines(imported.screen, "import: [");
  REQUIRE(!importing.empty());
  CHECK(contains(importing.back(), "3/3"));
  CHECK(contains(importing.back(), "2 crash"));
  CHECK(contains(importing.back(), "1 run ok here"));
  // Each artifact's line is on a line of its own.
  for (const auto& l : visible_lines(imported.screen)) {
    if (contains(l, "imported ") || contains(l, "not imported ")) CHECK(l.rfind("import: ", 0) != 0);
  }
}

TEST_CASE("progress: a terminal narrower than the line gets it cut, not wrapped") {
  e2e::TempDir dir;
  e2e::TempDir markers(01777);
  write_inputs(dir, 0, 2, 2);
  const auto r = run_on_pty({"run", "--no-store", "--max-attempts", "1", "--no-breaker", dir.path() + "/in", "--",
                             e2e::fixture("poison_corpus"), markers.path()},
                            30);
  INFO(r.screen);
  const auto drawn = drawn_lines(r.screen, "run: ");
  REQUIRE(!drawn.empty());
  for (const auto& l : drawn) CHECK(l.size() <= 29);
  CHECK(drawn.back() == std::string("run: [########################]").substr(0, 29));
}
