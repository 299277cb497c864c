#include "supervisor/cli/progress.h"

#include <fcntl.h>
#include <sys/ioctl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <nlohmann/json.hpp>

#include "shared/control.h"

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

// The width of the terminal `out` is on, 0 when it is not one or says nothing.
std::size_t terminal_width(std::FILE* out) {
  struct winsize ws {};
  if (out == nullptr || ::ioctl(::fileno(out), TIOCGWINSZ, &ws) != 0) return 0;
  return ws.ws_col;
}

// parse_progress_fd of PILLBOX_PROGRESS_FD.
int progress_fd_from_environment() {
  static const int fd = [] {
    const char* text = std::getenv("PILLBOX_PROGRESS_FD");
    if (text == nullptr) return -1;
    const std::string value = text;
    // Read once, and gone from the environment: a program pillbox starts
    // (an alert hook, a nested pillbox) must not take it for its own.
    ::unsetenv("PILLBOX_PROGRESS_FD");
    return parse_progress_fd(value);
  }();
  return fd;
}

}  // namespace

int parse_progress_fd(const std::string& value) {
  if (value.empty() || value.size() > 9) return -1;
  char* end = nullptr;
  const long fd = std::strtol(value.c_str(), &end, 10);
  if (*end != '\0' || fd < 3) return -1;
  struct stat st {};
  if (::fstat(static_cast<int>(fd), &st) != 0 || !(S_ISFIFO(st.st_mode) || S_ISSOCK(st.st_mode))) return -1;
  ::fcntl(static_cast<int>(fd), F_SETFD, FD_CLOEXEC);
  return static_cast<int>(fd);
}

Progress::Progress(std::string label, std::size_t total, std::FILE* out, int json_fd)
    : label_(std::move(label)), total_(total), out_(out), json_fd_(json_fd), started_(Clock::now()) {}

Progress Progress::on_stderr(std::string label, std::size_t total, bool quiet) {
  const bool terminal = !quiet && ::isatty(STDERR_FILENO) == 1;
  return Progress(std::move(label), total, terminal ? stderr : nullptr, progress_fd_from_environment());
}

Progress::~Progress() {
  if (drawn_ || json_fd_ >= 0) finish();
}

std::string Progress::json_text() const {
  nlohmann::json counts = nlohmann::json::object();
  for (const auto& [what, n] : counts_) counts[what] = n;
  const nlohmann::json j = {{"label", label_}, {"done", done_}, {"total", total_}, {"note", note_}, {"counts", counts}};
  return j.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
}

void Progress::write_json(Clock::time_point now) {
  // One write a line (a pipe keeps it whole up to PIPE_BUF); a reader that
  // is gone costs the line, never the operation.
  (void)write_all(json_fd_, json_text() + "\n");
  last_json_ = now;
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
  if (!active() || finished_) return;
  note_ = note;
  const auto now = Clock::now();
  // The first line waits a full period too: an operation that ends at once
  // shows only its final line.
  const auto since = drawn_ ? now - last_draw_ : now - started_;
  if (out_ != nullptr && since >= kRedrawEvery) draw(now);
  const auto since_json = last_json_ != Clock::time_point{} ? now - last_json_ : now - started_;
  if (json_fd_ >= 0 && since_json >= kJsonEvery) write_json(now);
}

long& Progress::counter(const std::string& what) {
  for (auto& [name, n] : counts_) {
    if (name == what) return n;
  }
  return counts_.emplace_back(what, 0).second;
}

void Progress::count(const std::string& what, long delta) {
  if (active()) counter(what) += delta;
}

void Progress::set_count(const std::string& what, long n) {
  if (active()) counter(what) = n;
}

void Progress::hide() {
  if (!visible_ || out_ == nullptr) return;
  std::fputs(kEraseLine, out_);
  std::fflush(out_);
  visible_ = false;
}

void Progress::show() {
  if (out_ == nullptr || finished_ || !drawn_ || visible_) return;
  draw(Clock::now());
}

void Progress::finish() {
  if (finished_ || !active()) return;
  finished_ = true;
  if (json_fd_ >= 0) write_json(Clock::now());
  if (out_ == nullptr) return;
  draw(Clock::now());
  std::fputc('\n', out_);
  std::fflush(out_);
  visible_ = false;
}

}  // namespace pillbox
