#pragma once
// Progress of a long operation (run, reproduce, minimize, replay) on stderr:
// on a terminal, one line redrawn in place (a bar, done/total, rate, ETA) at
// most ten times a second; otherwise a plain log line every few seconds, so
// that CI logs and files get a record without a flood.
#include <chrono>
#include <cstddef>
#include <cstdio>
#include <string>

namespace pillbox {

class Progress {
 public:
  using Clock = std::chrono::steady_clock;
  // `total` 0: unknown (no bar, no ETA). `out` nullptr: silent.
  Progress(std::string label, std::size_t total, std::FILE* out, bool terminal);
  // stderr, drawn in place when it is a terminal.
  static Progress on_stderr(std::string label, std::size_t total);

  void set_total(std::size_t total) { total_ = total; }
  // `done` so far; `note` a short status shown after the numbers.
  void update(std::size_t done, const std::string& note = "");
  // The last state, and the end of the line on a terminal.
  void finish();

  // The line as it would be drawn now (tests).
  std::string render(Clock::time_point now) const;

 private:
  void draw(Clock::time_point now);

  std::string label_;
  std::size_t total_;
  std::FILE* out_;
  bool terminal_;
  std::size_t done_ = 0;
  std::string note_;
  Clock::time_point started_;
  Clock::time_point last_draw_{};
  bool drawn_ = false;
  bool finished_ = false;
};

}  // namespace pillbox
