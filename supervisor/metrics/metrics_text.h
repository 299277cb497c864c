#pragma once
// The Prometheus text exposition format, version 0.0.4. Written by hand:
// Debian packages no C++ library for it.
//
// A family's samples must directly follow its HELP and TYPE lines:
// Prometheus and `promtool check metrics` refuse split families. Label
// values and HELP text are escaped here, so they may hold anything (bytes
// from a payload or a store). Metric and label names are the caller's
// constants: asserted valid, never escaped.
#include <cstdint>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace pillbox::metrics {

// The content type of the format, for the HTTP answer.
inline constexpr std::string_view kContentType = "text/plain; version=0.0.4; charset=utf-8";

using Labels = std::vector<std::pair<std::string, std::string>>;

enum class MetricType { kCounter, kGauge, kHistogram };

// `value` escaped for a label value: \ as \\, " as \", newline as \n. Bytes
// that are not UTF-8 are replaced by U+FFFD: the format is UTF-8 text.
std::string escape_label_value(std::string_view value);

// A sample value as the format writes it: integers without a fraction,
// +Inf, -Inf, NaN.
std::string format_value(double value);

// A histogram's state: `counts[i]` observations fell in (bounds[i-1], bounds[i]]
// (not cumulative: cumulated when written); counts has one more element than
// bounds, the last for the observations above every bound (+Inf).
struct Histogram {
  std::vector<double> bounds;  // ascending
  std::vector<std::uint64_t> counts;
  double sum = 0;

  explicit Histogram(std::vector<double> upper_bounds = {});
  void observe(double value);
  std::uint64_t count() const;
};

class MetricsText {
 public:
  // Starts a family: its HELP and TYPE lines. `name` is a valid metric name
  // ([a-zA-Z_:][a-zA-Z0-9_:]*); counters end in _total by convention.
  void family(std::string_view name, std::string_view help, MetricType type);
  // One sample of the current family (for a histogram, use histogram()).
  void sample(std::string_view name, const Labels& labels, double value);
  // The _bucket (cumulative, le="..." ending with +Inf), _sum and _count
  // samples of histogram family `name`, for one set of labels.
  void histogram(std::string_view name, const Labels& labels, const Histogram& h);

  // Appends the families of `other` (written apart, e.g. so that a failed
  // part leaves nothing half-written here).
  void append(const MetricsText& other) { text_ += other.text_; }

  const std::string& text() const { return text_; }

 private:
  void write_sample(std::string_view name, const Labels& labels, const std::string* le, const std::string& value);
  std::string text_;
};

}  // namespace pillbox::metrics
