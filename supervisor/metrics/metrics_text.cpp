#include "supervisor/metrics/metrics_text.h"

#include <cassert>
#include <charconv>
#include <cmath>
#include <cstdio>

#include "shared/base64.h"

namespace pillbox::metrics {
namespace {

bool valid_name(std::string_view name) {
  if (name.empty()) return false;
  for (std::size_t i = 0; i < name.size(); ++i) {
    const char c = name[i];
    const bool letter = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || c == '_' || c == ':';
    const bool digit = c >= '0' && c <= '9';
    if (!letter && !(digit && i > 0)) return false;
  }
  return true;
}

// The format is UTF-8 text. A value that is not valid UTF-8 (a tampered
// store) keeps its ASCII and has every other byte replaced by U+FFFD.
std::string valid_utf8(std::string_view value) {
  if (is_valid_utf8(value)) return std::string(value);
  std::string out;
  out.reserve(value.size());
  for (const char c : value) {
    if (static_cast<unsigned char>(c) < 0x80) out += c;
    else out += "\xEF\xBF\xBD";
  }
  return out;
}

std::string escape(std::string_view value, bool quote) {
  const std::string text = valid_utf8(value);
  std::string out;
  out.reserve(text.size());
  for (const char c : text) {
    if (c == '\\') out += "\\\\";
    else if (c == '\n') out += "\\n";
    else if (c == '"' && quote) out += "\\\"";
    else out += c;
  }
  return out;
}

}  // namespace

std::string escape_label_value(std::string_view value) { return escape(value, true); }

std::string format_value(double value) {
  if (std::isnan(value)) return "NaN";
  if (std::isinf(value)) return value > 0 ? "+Inf" : "-Inf";
  char buf[64];
  // Whole numbers (every counter and gauge here) without an exponent up to
  // 2^53, where a double stops holding every integer.
  if (value == std::floor(value) && std::fabs(value) < 9007199254740992.0) {
    std::snprintf(buf, sizeof buf, "%.0f", value);
    return buf;
  }
  // Otherwise the shortest text that reads back as the same double (0.005, not 0.0050000000000000001).
  const auto [end, ec] = std::to_chars(buf, buf + sizeof buf, value);
  return ec == std::errc() ? std::string(buf, end) : std::string("NaN");
}

Histogram::Histogram(std::vector<double> upper_bounds)
    : bounds(std::move(upper_bounds)), counts(bounds.size() + 1, 0) {}

void Histogram::observe(double value) {
  std::size_t i = 0;
  while (i < bounds.size() && value > bounds[i]) ++i;  // le: a value equal to a bound is in its bucket
  ++counts[i];
  sum += value;
}

std::uint64_t Histogram::count() const {
  std::uint64_t n = 0;
  for (const auto c : counts) n += c;
  return n;
}

void MetricsText::family(std::string_view name, std::string_view help, MetricType type) {
  assert(valid_name(name));
  (void)valid_name;
  const char* type_name = type == MetricType::kCounter ? "counter" : type == MetricType::kGauge ? "gauge" : "histogram";
  text_ += "# HELP " + std::string(name) + ' ' + escape(help, false) + "\n# TYPE " + std::string(name) + ' ' +
           type_name + '\n';
}

void MetricsText::sample(std::string_view name, const Labels& labels, double value) {
  write_sample(name, labels, nullptr, format_value(value));
}

void MetricsText::histogram(std::string_view name, const Labels& labels, const Histogram& h) {
  const std::string bucket = std::string(name) + "_bucket";
  std::uint64_t cumulative = 0;
  for (std::size_t i = 0; i < h.bounds.size(); ++i) {
    cumulative += h.counts[i];
    const std::string le = format_value(h.bounds[i]);
    write_sample(bucket, labels, &le, format_value(static_cast<double>(cumulative)));
  }
  cumulative += h.counts.back();
  const std::string inf = "+Inf";
  write_sample(bucket, labels, &inf, format_value(static_cast<double>(cumulative)));
  write_sample(std::string(name) + "_sum", labels, nullptr, format_value(h.sum));
  write_sample(std::string(name) + "_count", labels, nullptr, format_value(static_cast<double>(cumulative)));
}

void MetricsText::write_sample(std::string_view name, const Labels& labels, const std::string* le,
                               const std::string& value) {
  assert(valid_name(name));
  text_ += name;
  if (!labels.empty() || le != nullptr) {
    text_ += '{';
    bool first = true;
    for (const auto& [label, label_value] : labels) {
      assert(valid_name(label));
      if (!first) text_ += ',';
      first = false;
      text_ += label;
      text_ += "=\"";
      text_ += escape_label_value(label_value);
      text_ += '"';
    }
    if (le != nullptr) {
      if (!first) text_ += ',';
      text_ += "le=\"";
      text_ += *le;
      text_ += '"';
    }
    text_ += '}';
  }
  text_ += ' ';
  text_ += value;
  text_ += '\n';
}

}  // namespace pillbox::metrics
