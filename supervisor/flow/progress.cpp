#include "supervisor/flow/progress.h"

#include <sys/ioctl.h>
#include <unistd.h>

#include <algorithm>
#include <cmath>

namespace pillbox {
namespace {

constexpr auto kRedrawEvery = std::chrono::milliseconds(100);
constexpr std::size_t kBarWidth = 24;
// Back to the start of the line and erase it (CSI K: to its end).
constexpr const char* kEraseLine = "\r\x1b[K";

std::string duration_text(double seconds) {
  const long s = std::lround(std::max(0.0, seconds));
  char buf[32];
  if (s < 60) std::snprintf(buf, sizeof buf, "%lds", s);
  else if (s < 3600) std::snprintf(buf, sizeof buf, "%ldm%02lds", s / 60, s % 60);
  else std::snprintf(buf, sizeof buf, "%ldh%02ldm", s / 3600, s / 60 % 60);
  return buf;
}

// At most `width` columns, counting a UTF-8 sequence as one and never cutting
// one in half; control bytes (which would move the cursor) shown as '?'.
std::string fit(const std::string& line, std::size_t width) {
  std::string out;
  out.reserve(line.size());
  std::size_t columns = 0;
  for (const char ch : line) {
    const auto c = static_cast<unsigned char>(ch);
    const bool continuation = (c & 0xC0) == 0x80;
    if (!continuation) {
      if (width > 0 && columns == width) break;
      ++columns;
    }
    out += c < 0x20 || c == 0x7F ? '?' : ch;
  }
  return out;
}

}  // namespace

std::size_t terminal_width(std::FILE* out) {
  struct winsize ws {};
  if (out == nullptr || ::ioctl(::fileno(out), TIOCGWINSZ, &ws) != 0) return 0;
  return ws.ws_col;
}

Progress::Progress(std::string label, std::size_t total, std::FILE* out)
    : label_(std::move(label)), total_(total), out_(out), started_(Clock::now()) {}

Progress Progress::on_stderr(std::string label, std::size_t total, bool quiet) {
  const bool terminal = !quiet && ::isatty(STDERR_FILENO) == 1;
  return Progress(std::move(label), total, terminal ? stderr : nullptr);
}

Progress::~Progress() {
  if (drawn_) finish();
}

std::string Progress::render(Clock::time_point now, std::size_t width) const {
  const double elapsed = std::chrono::duration<double>(now - started_).count();
  const double budget = std::chrono::duration<double>(time_budget_).count();
  const std::size_t done_here = done_ > done_before_ ? done_ - done_before_ : 0;
  const double rate = elapsed > 0 ? static_cast<double>(done_here) / elapsed : 0;
  std::string line = label_ + ": ";
  if (total_ > 0 || budget > 0) {
    double fraction = total_ > 0 ? static_cast<double>(done_) / static_cast<double>(total_) : 0;
    if (budget > 0) fraction = std::max(fraction, elapsed / budget);
    const auto filled = static_cast<std::size_t>(std::clamp(fraction, 0.0, 1.0) * kBarWidth);
    line += "[" + std::string(filled, '#') + std::string(kBarWidth - filled, '-') + "] ";
  }
  line += std::to_string(done_);
  if (total_ > 0) line += "/" + std::to_string(total_);
  char numbers[64];
  std::snprintf(numbers, sizeof numbers, "  %.1f/s", rate);
  line += numbers;
  // Whichever budget ends first: the count at this rate, or the time.
  double eta = -1;
  if (total_ > 0 && done_ < total_ && rate > 0) eta = static_cast<double>(total_ - done_) / rate;
  if (budget > 0 && elapsed < budget) eta = eta < 0 ? budget - elapsed : std::min(eta, budget - elapsed);
  if (eta >= 0 && (total_ == 0 || done_ < total_)) line += "  ETA " + duration_text(eta);
  line += "  " + duration_text(elapsed) + " elapsed";
  std::string counts;
  for (const auto& [what, n] : counts_) {
    if (n <= 0) continue;
    counts += (counts.empty() ? "" : ", ") + std::to_string(n) + " " + what;
  }
  if (!counts.empty()) line += "  " + counts;
  if (!note_.empty()) line += "  " + note_;
  return fit(line, width);
}

void Progress::draw(Clock::time_point now) {
  // One column short of the width: writing the last column makes some
  // terminals wrap at once, and the next redraw would start a line lower.
  const std::size_t width = terminal_width(out_);
  const std::string line = kEraseLine + render(now, width == 0 ? 0 : std::max<std::size_t>(1, width - 1));
  std::fwrite(line.data(), 1, line.size(), out_);
  std::fflush(out_);
  last_draw_ = now;
  drawn_ = true;
  visible_ = true;
}

void Progress::update(std::size_t done, const std::string& note) {
  done_ = done;
  if (out_ == nullptr || finished_) return;
  note_ = note;
  const auto now = Clock::now();
  // The first line waits a full period too: an operation that ends at once
  // shows only its final line.
  const auto since = drawn_ ? now - last_draw_ : now - started_;
  if (since >= kRedrawEvery) draw(now);
}

long& Progress::counter(const std::string& what) {
  for (auto& [name, n] : counts_) {
    if (name == what) return n;
  }
  return counts_.emplace_back(what, 0).second;
}

void Progress::count(const std::string& what, long delta) {
  if (out_ != nullptr) counter(what) += delta;
}

void Progress::set_count(const std::string& what, long n) {
  if (out_ != nullptr) counter(what) = n;
}

void Progress::hide() {
  if (!visible_) return;
  std::fputs(kEraseLine, out_);
  std::fflush(out_);
  visible_ = false;
}

void Progress::show() {
  if (out_ == nullptr || finished_ || !drawn_ || visible_) return;
  draw(Clock::now());
}

void Progress::finish() {
  if (finished_ || out_ == nullptr) return;
  finished_ = true;
  draw(Clock::now());
  std::fputc('\n', out_);
  std::fflush(out_);
  visible_ = false;
}

}  // namespace pillbox
