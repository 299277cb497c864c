#pragma once
// Progress of a long operation on stderr, for a person watching a terminal:
// one line redrawn in place, at most ten times a second, cut to the
// terminal's width (docs/operator.md, Progress). Nothing when stderr is not
// a terminal (logs get the summary) or with --quiet.
//
// For a program that shows pillbox's progress (the console's jobs,
// supervisor/serve/console_jobs.h): with PILLBOX_PROGRESS_FD=N set,
// on_stderr's Progress also writes one JSON object a line to N, {"label",
// "done", "total", "note", "counts": {WHAT: N}}, at most kJsonEvery apart
// and once more at finish(), terminal or not, --quiet notwithstanding.
#include <chrono>
#include <cstddef>
#include <cstdio>
#include <string>
#include <utility>
#include <vector>

namespace pillbox {

class Progress {
 public:
  using Clock = std::chrono::steady_clock;
  // `total` 0: unknown (no bar, no ETA). `out` nullptr: silent, and every
  // call returns at once. `out` is taken to be a terminal. `json_fd`: the
  // JSON lines' descriptor (see above), -1 for none; it stays the caller's.
  Progress(std::string label, std::size_t total, std::FILE* out, int json_fd = -1);
  // On stderr when it is a terminal and `quiet` is false; silent otherwise.
  // And JSON lines to PILLBOX_PROGRESS_FD when it is set (see above).
  static Progress on_stderr(std::string label, std::size_t total, bool quiet = false);
  Progress(const Progress&) = delete;
  Progress& operator=(const Progress&) = delete;
  // Ends the line if finish() was not called (an early error return), so
  // that the message after it starts on a line of its own.
  ~Progress();

  // Whether anything is shown: callers skip their own bookkeeping when not.
  bool active() const { return out_ != nullptr || json_fd_ >= 0; }
  void set_total(std::size_t total) { total_ = total; }
  // Of the `done` counts, this many were done before this process started
  // (a resumed minimization): they count toward the bar, not the rate.
  void set_done_before(std::size_t before) { done_before_ = before; }
  // A budget of time besides (or instead of) a count, like fuzz --max-time:
  // the bar and the ETA follow whichever ends first.
  void set_time_budget(Clock::duration budget) { time_budget_ = budget; }
  // `done` so far; `note` a short status shown after the numbers.
  void update(std::size_t done, const std::string& note = "");
  std::size_t done() const { return done_; }
  // `delta` more of `what` ("crash", "cpu-limit", "skipped") among those
  // done; shown as "2 crash, 1 cpu-limit" in the order first counted. A
  // negative delta takes some back (a verdict withdrawn).
  void count(const std::string& what, long delta = 1);
  // The same, setting the count instead of adding to it.
  void set_count(const std::string& what, long n);
  // Around a line printed on the same terminal (a task's result): hide()
  // erases the progress line, show() draws it again at once.
  void hide();
  void show();
  // The last state, left on its own line.
  void finish();

  // The line as it would be drawn now, at most `width` columns (0: no
  // limit). Tests call it directly.
  std::string render(Clock::time_point now, std::size_t width = 0) const;
  // The JSON line's object as text (no newline). Tests call it directly.
  std::string json_text() const;

 private:
  void draw(Clock::time_point now);
  void write_json(Clock::time_point now);
  long& counter(const std::string& what);

  std::string label_;
  std::size_t total_;
  std::FILE* out_;
  int json_fd_;
  Clock::time_point last_json_{};
  Clock::duration time_budget_{};
  std::size_t done_ = 0;
  std::size_t done_before_ = 0;
  std::string note_;
  std::vector<std::pair<std::string, long>> counts_;
  Clock::time_point started_;
  Clock::time_point last_draw_{};
  bool drawn_ = false;    // drawn at least once
  bool visible_ = false;  // on the screen now (not hidden, not finished)
  bool finished_ = false;
};

// The least time between two JSON lines (the last one at finish() aside).
inline constexpr std::chrono::milliseconds kJsonEvery{250};
// PILLBOX_PROGRESS_FD's value when it names a pipe or a socket above 2 (the
// console's job gives one; never a file pillbox has open there, such as its
// store), made close-on-exec; else -1.
int parse_progress_fd(const std::string& value);
}  // namespace pillbox
