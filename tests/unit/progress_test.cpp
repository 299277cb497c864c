// The progress line (supervisor/cli/progress.h): what it says for a known
// and an unknown total, failures by kind, a time budget, a narrow terminal,
// and what it writes around lines printed above it. Drawn into a memory
// stream (which is no terminal: nothing is cut to a width there).
#include <doctest/doctest.h>

#include <cstdio>
#include <cstdlib>
#include <string>
#include <thread>
#include <fcntl.h>
#include <unistd.h>
#include <vector>

#include <nlohmann/json.hpp>

#include "supervisor/cli/progress.h"

using namespace pillbox;

namespace {

// A FILE* that collects what is written to it.
class MemoryStream {
 public:
  MemoryStream() : file_(::open_memstream(&data_, &size_)) { REQUIRE(file_ != nullptr); }
  ~MemoryStream() {
    std::fclose(file_);
    std::free(data_);
  }
  std::FILE* file() const { return file_; }
  std::string text() {
    std::fflush(file_);
    return std::string(data_, size_);
  }

 private:
  char* data_ = nullptr;
  std::size_t size_ = 0;
  std::FILE* file_;
};

const auto kTenSecondsOn = [] { return Progress::Clock::now() + std::chrono::seconds(10); };

}  // namespace

TEST_CASE("progress line: a known total has a bar, done/total, the rate, the ETA and failures by kind") {
  MemoryStream out;
  Progress p("run", 100, out.file());
  p.update(25);
  p.count("crash");
  p.count("crash");
  p.count("cpu-limit");
  p.count("skipped", 3);
  const std::string line = p.render(kTenSecondsOn());
  INFO(line);
  CHECK(line.find("run: [######------------------] 25/100") == 0);
  CHECK(line.find("2.5/s") != std::string::npos);
  CHECK(line.find("ETA 3") != std::string::npos);  // 75 left at 2.5/s: 30 s
  CHECK(line.find("2 crash, 1 cpu-limit, 3 skipped") != std::string::npos);
}

TEST_CASE("progress line: an unknown total has counts and the rate, no bar and no ETA") {
  MemoryStream out;
  Progress p("replay", 0, out.file());
  p.update(7, "paused: outage suspected");
  p.count("crash");
  const std::string line = p.render(kTenSecondsOn());
  INFO(line);
  CHECK(line.find("replay: 7  0.7/s") == 0);
  CHECK(line.find('[') == std::string::npos);
  CHECK(line.find("ETA") == std::string::npos);
  CHECK(line.find("1 crash") != std::string::npos);
  CHECK(line.find("paused: outage suspected") != std::string::npos);
}

TEST_CASE("progress line: a count taken back below one is not shown; done counts say no ETA") {
  MemoryStream out;
  Progress p("run", 4, out.file());
  p.count("crash");
  p.count("crash", -1);
  p.update(4);
  const std::string line = p.render(kTenSecondsOn());
  INFO(line);
  CHECK(line.find("[########################] 4/4") != std::string::npos);
  CHECK(line.find("crash") == std::string::npos);
  CHECK(line.find("ETA") == std::string::npos);
}

TEST_CASE("progress line: a time budget fills the bar and sets the ETA when it ends before the count") {
  MemoryStream out;
  Progress by_time("fuzz", 0, out.file());
  by_time.set_time_budget(std::chrono::seconds(40));
  by_time.update(500);
  std::string line = by_time.render(kTenSecondsOn());
  INFO(line);
  CHECK(line.find("fuzz: [######------------------] 500  50.0/s") == 0);
  CHECK(line.find("ETA 30s") != std::string::npos);

  Progress both("fuzz", 1000, out.file());  // 500 more runs at 50/s: 10 s, before the 30 s left
  both.set_time_budget(std::chrono::seconds(40));
  both.update(500);
  line = both.render(kTenSecondsOn());
  CHECK(line.find("ETA 10s") != std::string::npos);
}

TEST_CASE("progress line: runs of earlier sessions count toward the bar, not the rate") {
  MemoryStream out;
  Progress p("minimize 3", 100, out.file());
  p.set_done_before(40);
  p.update(60);
  const std::string line = p.render(kTenSecondsOn());
  INFO(line);
  CHECK(line.find("60/100  2.0/s") != std::string::npos);
  CHECK(line.find("ETA 20s") != std::string::npos);
}

TEST_CASE("progress line: cut to the width, never mid-character, with control bytes made harmless") {
  MemoryStream out;
  Progress p("minimize r\xc3\xa9\x1b[2Jcord", 100, out.file());
  p.update(1);
  // One moment for every render: the ETA is computed from it, and a render
  // a second later (a loaded host) would differ in it.
  const auto at = kTenSecondsOn();
  const std::string full = p.render(at);
  CHECK(full.find('\x1b') == std::string::npos);
  CHECK(full.find("r\xc3\xa9?[2Jcord") != std::string::npos);
  CHECK(p.render(at, 11) == "minimize r\xc3\xa9");
  CHECK(p.render(at, 10) == "minimize r");
  CHECK(p.render(at, 0) == full);
}

TEST_CASE("progress line: hide() erases it, show() draws it again, finish() leaves the last state") {
  MemoryStream out;
  Progress p("import", 3, out.file());
  p.hide();
  p.show();
  CHECK(out.text().empty());  // never drawn yet: nothing to erase or restore
  p.finish();
  const std::string finished = out.text();
  CHECK(finished.rfind("\r\x1b[Kimport: [", 0) == 0);
  CHECK(finished.back() == '\n');
  p.update(3);
  p.show();
  CHECK(out.text() == finished);  // nothing after the end
}

TEST_CASE("progress line: at most ten redraws a second; hide and show around a line printed above") {
  MemoryStream out;
  Progress p("run", 1000, out.file());
  for (std::size_t i = 1; i <= 1000; ++i) p.update(i);
  // 1000 updates at once: none is 100 ms after the start, so nothing is drawn.
  CHECK(out.text().empty());
  p.finish();
  const std::string drawn = out.text();
  p.hide();  // finished: nothing on the screen to erase
  CHECK(out.text() == drawn);
}

TEST_CASE("progress line: drawn once the period has passed; erased and drawn again around a line above it") {
  MemoryStream out;
  Progress p("run", 1000, out.file());
  p.update(1);
  CHECK(out.text().empty());
  // The rate limit is the clock itself: nothing else to wait on.
  std::this_thread::sleep_for(std::chrono::milliseconds(120));
  p.update(2);
  const std::string first = out.text();
  CHECK(first.rfind("\r\x1b[Krun: [", 0) == 0);
  CHECK(first.find("2/1000") != std::string::npos);
  p.update(3);  // within the period: not drawn
  CHECK(out.text() == first);
  p.hide();
  CHECK(out.text() == first + "\r\x1b[K");
  p.hide();  // already erased: nothing more
  CHECK(out.text() == first + "\r\x1b[K");
  p.show();  // at once, whatever the period
  const std::string shown = out.text().substr(first.size() + 4);
  CHECK(shown.rfind("\r\x1b[Krun: [", 0) == 0);
  CHECK(shown.find("3/1000") != std::string::npos);
}

TEST_CASE("progress line: silent without a stream, whatever is called") {
  Progress p("run", 10, nullptr);
  CHECK_FALSE(p.active());
  p.update(5);
  p.count("crash");
  p.hide();
  p.show();
  p.finish();
  CHECK(p.render(kTenSecondsOn()).find("5/10") != std::string::npos);
}

TEST_CASE("progress line: left drawn by an early return, it is ended so the next message starts a line") {
  MemoryStream out;
  {
    Progress p("reproduce 4", 10, out.file());
    std::this_thread::sleep_for(std::chrono::milliseconds(120));
    p.update(3);
    REQUIRE(!out.text().empty());
  }  // no finish(): an error return
  const std::string text = out.text();
  CHECK(text.back() == '\n');
  CHECK(text.find("3/10") != std::string::npos);
  MemoryStream quiet;
  { Progress never("reproduce 4", 10, quiet.file()); }  // never drawn: nothing to end
  CHECK(quiet.text().empty());
}

namespace {

// The JSON lines a Progress wrote to a pipe, once it is closed.
std::vector<nlohmann::json> json_lines(int fd) {
  std::string text;
  char block[4096];
  ssize_t n;
  while ((n = ::read(fd, block, sizeof block)) > 0) text.append(block, static_cast<std::size_t>(n));
  std::vector<nlohmann::json> out;
  std::size_t start = 0;
  for (std::size_t end; (end = text.find('\n', start)) != std::string::npos; start = end + 1) {
    out.push_back(nlohmann::json::parse(text.substr(start, end - start)));
  }
  CHECK(start == text.size());  // every line ended
  return out;
}

}  // namespace

TEST_CASE("progress JSON lines: none before a period has passed, the final state at finish, with counts and note") {
  int fds[2];
  REQUIRE(::pipe(fds) == 0);
  {
    Progress p("replay", 3, nullptr, fds[1]);
    CHECK(p.active());
    p.update(1);
    p.count("crash");
    p.count("resolved", 2);
    p.update(3, "stopped: 1 replayed payloads failed again");
    p.finish();
    p.finish();  // once only
  }
  ::close(fds[1]);
  const auto lines = json_lines(fds[0]);
  ::close(fds[0]);
  REQUIRE(lines.size() == 1);
  CHECK(lines[0] == nlohmann::json{{"label", "replay"}, {"done", 3}, {"total", 3},
                                   {"note", "stopped: 1 replayed payloads failed again"},
                                   {"counts", {{"crash", 1}, {"resolved", 2}}}});
}

TEST_CASE("progress JSON lines: at most 4 a second while updating, and a last one when it goes unfinished") {
  int fds[2];
  REQUIRE(::pipe(fds) == 0);
  const auto start = Progress::Clock::now();
  std::size_t updates = 0;
  {
    Progress p("minimize", 0, nullptr, fds[1]);
    // Updates as fast as they come for 1.1 s: the lines are what limits.
    while (Progress::Clock::now() - start < std::chrono::milliseconds(1100)) p.update(++updates);
  }  // destroyed without finish(): the last state is written all the same
  ::close(fds[1]);
  const auto lines = json_lines(fds[0]);
  ::close(fds[0]);
  CHECK(lines.size() >= 2);
  CHECK(lines.size() <= 5);  // 4 in 1.1 s (the first after 250 ms), and the last
  CHECK(lines.back()["done"] == updates);
  CHECK(lines.back()["total"] == 0);
  CHECK(lines.back()["label"] == "minimize");
  for (std::size_t i = 1; i < lines.size(); ++i) CHECK(lines[i]["done"] >= lines[i - 1]["done"]);
}

TEST_CASE("progress JSON lines: PILLBOX_PROGRESS_FD is used only when it names a pipe or socket above 2") {
  int fds[2];
  REQUIRE(::pipe(fds) == 0);
  CHECK(parse_progress_fd(std::to_string(fds[1])) == fds[1]);
  CHECK((::fcntl(fds[1], F_GETFD) & FD_CLOEXEC) != 0);  // not handed on to what pillbox runs
  CHECK(Progress("run", 1, nullptr, fds[1]).active());  // --quiet: the JSON lines all the same
  for (const char* bad : {"", "2", "1x", "-4", "99999", "1234567890"}) {
    INFO(bad);
    CHECK(parse_progress_fd(bad) == -1);
  }
  // A file open there (a store's database) is never written into.
  char path[] = "/tmp/pillbox-progress-XXXXXX";
  const int file = ::mkstemp(path);
  REQUIRE(file >= 0);
  ::unlink(path);
  CHECK(parse_progress_fd(std::to_string(file)) == -1);
  ::close(file);
  ::close(fds[0]);
  ::close(fds[1]);
}
