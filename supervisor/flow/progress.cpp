#include "supervisor/flow/progress.h"

#include <unistd.h>

#include <cmath>

namespace pillbox {
namespace {

constexpr auto kTerminalEvery = std::chrono::milliseconds(100);
constexpr auto kLogEvery = std::chrono::seconds(5);
constexpr std::size_t kBarWidth = 24;

std::string duration_text(double seconds) {
  char buf[32];
  if (seconds < 60) std::snprintf(buf, sizeof buf, "%.0fs", std::ceil(seconds));
  else if (seconds < 3600) std::snprintf(buf, sizeof buf, "%dm%02ds", static_cast<int>(seconds) / 60, static_cast<int>(seconds) % 60);
  else std::snprintf(buf, sizeof buf, "%dh%02dm", static_cast<int>(seconds) / 3600, static_cast<int>(seconds) / 60 % 60);
  return buf;
}

}  // namespace

Progress::Progress(std::string label, std::size_t total, std::FILE* out, bool terminal)
    : label_(std::move(label)), total_(total), out_(out), terminal_(terminal), started_(Clock::now()) {}

Progress Progress::on_stderr(std::string label, std::size_t total) {
  return Progress(std::move(label), total, stderr, ::isatty(STDERR_FILENO) == 1);
}

std::string Progress::render(Clock::time_point now) const {
  const double elapsed = std::chrono::duration<double>(now - started_).count();
  const double rate = elapsed > 0 ? static_cast<double>(done_) / elapsed : 0;
  std::string line = label_ + ": ";
  if (total_ > 0 && terminal_) {
    const std::size_t filled = std::min(kBarWidth, done_ * kBarWidth / total_);
    line += "[" + std::string(filled, '#') + std::string(kBarWidth - filled, '-') + "] ";
  }
  line += std::to_string(done_);
  if (total_ > 0) line += "/" + std::to_string(total_);
  char numbers[96];
  std::snprintf(numbers, sizeof numbers, "  %.1f/s", rate);
  line += numbers;
  if (total_ > 0 && done_ < total_ && rate > 0) {
    line += "  ETA " + duration_text(static_cast<double>(total_ - done_) / rate);
  }
  line += "  " + duration_text(elapsed) + " elapsed";
  if (!note_.empty()) line += "  " + note_;
  return line;
}

void Progress::draw(Clock::time_point now) {
  if (out_ == nullptr) return;
  const std::string line = render(now);
  if (terminal_) std::fprintf(out_, "\r\x1b[K%s", line.c_str());
  else std::fprintf(out_, "%s\n", line.c_str());
  std::fflush(out_);
  last_draw_ = now;
  drawn_ = true;
}

void Progress::update(std::size_t done, const std::string& note) {
  done_ = done;
  note_ = note;
  const auto now = Clock::now();
  const auto every = terminal_ ? std::chrono::duration_cast<Clock::duration>(kTerminalEvery)
                               : std::chrono::duration_cast<Clock::duration>(kLogEvery);
  // Not on a terminal, the first line waits a full period: short operations print nothing.
  const auto since = drawn_ ? now - last_draw_ : now - started_;
  if (since >= every) draw(now);
}

void Progress::finish() {
  if (finished_ || out_ == nullptr) return;
  finished_ = true;
  if (terminal_) {
    draw(Clock::now());
    std::fputc('\n', out_);
    std::fflush(out_);
  } else if (drawn_) {
    draw(Clock::now());
  }
}

}  // namespace pillbox
