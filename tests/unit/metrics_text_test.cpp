// The Prometheus text format (supervisor/metrics/metrics_text.h) and the
// run's counters (run_metrics.h): exact text, escaping, cumulative buckets.
#include <doctest/doctest.h>

#include <cmath>
#include <limits>
#include <string>

#include "supervisor/metrics/metrics_text.h"
#include "supervisor/metrics/run_metrics.h"

using namespace pillbox;
using namespace pillbox::metrics;

TEST_CASE("metrics text: a family is HELP, TYPE, then its samples, labels in the order given") {
  MetricsText text;
  text.family("pillbox_things", "Things, by colour.", MetricType::kGauge);
  text.sample("pillbox_things", {{"colour", "red"}, {"size", "big"}}, 3);
  text.sample("pillbox_things", {}, 0);
  text.family("pillbox_events_total", "Events.", MetricType::kCounter);
  text.sample("pillbox_events_total", {}, 12);
  CHECK(text.text() ==
        "# HELP pillbox_things Things, by colour.\n"
        "# TYPE pillbox_things gauge\n"
        "pillbox_things{colour=\"red\",size=\"big\"} 3\n"
        "pillbox_things 0\n"
        "# HELP pillbox_events_total Events.\n"
        "# TYPE pillbox_events_total counter\n"
        "pillbox_events_total 12\n");
}

TEST_CASE("metrics text: label values escape backslash, double quote and newline; HELP escapes backslash and newline") {
  CHECK(escape_label_value("plain") == "plain");
  CHECK(escape_label_value("a\\b") == "a\\\\b");
  CHECK(escape_label_value("say \"hi\"") == "say \\\"hi\\\"");
  CHECK(escape_label_value("two\nlines") == "two\\nlines");
  CHECK(escape_label_value("\"}\nevil_metric 1\n") == "\\\"}\\nevil_metric 1\\n");
  MetricsText text;
  text.family("pillbox_x", "a \\ and a\nnewline and \"quotes\"", MetricType::kGauge);
  text.sample("pillbox_x", {{"k", "</script>\"\\\n"}}, 1);
  CHECK(text.text() ==
        "# HELP pillbox_x a \\\\ and a\\nnewline and \"quotes\"\n"
        "# TYPE pillbox_x gauge\n"
        "pillbox_x{k=\"</script>\\\"\\\\\\n\"} 1\n");
}

TEST_CASE("metrics text: a label value that is not UTF-8 keeps its ASCII, every other byte becomes U+FFFD") {
  CHECK(escape_label_value("caf\xc3\xa9") == "caf\xc3\xa9");  // valid UTF-8 is kept
  CHECK(escape_label_value("a\xff" "b\xc3") == "a\xEF\xBF\xBD" "b\xEF\xBF\xBD");
  CHECK(escape_label_value(std::string("nul\0x", 5)) == std::string("nul\0x", 5));
}

TEST_CASE("metrics text: values are whole numbers without exponent, fractions the shortest that read back, infinities and NaN spelled") {
  CHECK(format_value(0) == "0");
  CHECK(format_value(42) == "42");
  CHECK(format_value(-3) == "-3");
  CHECK(format_value(1e15) == "1000000000000000");
  CHECK(format_value(0.25) == "0.25");
  CHECK(format_value(0.005) == "0.005");  // the shortest text that reads back as the same double
  CHECK(format_value(1.0 / 3) == "0.3333333333333333");
  CHECK(format_value(std::numeric_limits<double>::infinity()) == "+Inf");
  CHECK(format_value(-std::numeric_limits<double>::infinity()) == "-Inf");
  CHECK(format_value(std::nan("")) == "NaN");
}

TEST_CASE("metrics text: histogram buckets are cumulative, a value on a bound is in that bucket, +Inf counts all") {
  Histogram h({1, 2, 5});
  for (const double v : {0.5, 1.0, 1.5, 3.0, 10.0}) h.observe(v);
  CHECK(h.count() == 5);
  CHECK(h.sum == doctest::Approx(16.0));
  MetricsText text;
  text.family("pillbox_d_seconds", "Durations.", MetricType::kHistogram);
  text.histogram("pillbox_d_seconds", {{"kind", "crash"}}, h);
  CHECK(text.text() ==
        "# HELP pillbox_d_seconds Durations.\n"
        "# TYPE pillbox_d_seconds histogram\n"
        "pillbox_d_seconds_bucket{kind=\"crash\",le=\"1\"} 2\n"
        "pillbox_d_seconds_bucket{kind=\"crash\",le=\"2\"} 3\n"
        "pillbox_d_seconds_bucket{kind=\"crash\",le=\"5\"} 4\n"
        "pillbox_d_seconds_bucket{kind=\"crash\",le=\"+Inf\"} 5\n"
        "pillbox_d_seconds_sum{kind=\"crash\"} 16\n"
        "pillbox_d_seconds_count{kind=\"crash\"} 5\n");
}

TEST_CASE("metrics text: an empty histogram has every bucket at 0") {
  MetricsText text;
  text.family("pillbox_e", "Empty.", MetricType::kHistogram);
  text.histogram("pillbox_e", {}, Histogram({0.5}));
  CHECK(text.text() ==
        "# HELP pillbox_e Empty.\n# TYPE pillbox_e histogram\n"
        "pillbox_e_bucket{le=\"0.5\"} 0\npillbox_e_bucket{le=\"+Inf\"} 0\npillbox_e_sum 0\npillbox_e_count 0\n");
}

TEST_CASE("run metrics: slots busy follow attempts; verdicts count by kind and verdict; the breaker is a 0/1 gauge") {
  RunMetrics m;
  m.set_slots(4);
  m.attempt_started();
  m.attempt_started();
  m.attempt_started();
  m.attempt_ended(Kind::kOk, 3);
  m.attempt_ended(Kind::kCrash, 1500);
  m.verdict(Kind::kOk, "ok", false);
  m.verdict(Kind::kCrash, "quarantined", true);
  m.verdict(Kind::kCrash, "quarantined", false);
  m.taken_back();
  m.input_error();
  m.set_breaker_open(true);
  MetricsText text;
  m.render(text);
  const std::string& t = text.text();
  INFO(t);
  CHECK(t.find("pillbox_slots 4\n") != std::string::npos);
  CHECK(t.find("pillbox_slots_busy 1\n") != std::string::npos);
  CHECK(t.find("pillbox_tasks_total{kind=\"ok\",verdict=\"ok\"} 1\n") != std::string::npos);
  CHECK(t.find("pillbox_tasks_total{kind=\"crash\",verdict=\"quarantined\"} 2\n") != std::string::npos);
  CHECK(t.find("pillbox_attempts_total{kind=\"crash\"} 1\n") != std::string::npos);
  CHECK(t.find("pillbox_attempts_total{kind=\"ok\"} 1\n") != std::string::npos);
  CHECK(t.find("pillbox_attempt_duration_seconds_bucket{le=\"0.005\"} 1\n") != std::string::npos);
  CHECK(t.find("pillbox_attempt_duration_seconds_bucket{le=\"1\"} 1\n") != std::string::npos);
  CHECK(t.find("pillbox_attempt_duration_seconds_bucket{le=\"2.5\"} 2\n") != std::string::npos);
  CHECK(t.find("pillbox_attempt_duration_seconds_bucket{le=\"+Inf\"} 2\n") != std::string::npos);
  CHECK(t.find("pillbox_attempt_duration_seconds_sum 1.503\n") != std::string::npos);
  CHECK(t.find("pillbox_attempt_duration_seconds_count 2\n") != std::string::npos);
  CHECK(t.find("pillbox_new_fingerprints_total 1\n") != std::string::npos);
  CHECK(t.find("pillbox_verdicts_taken_back_total 1\n") != std::string::npos);
  CHECK(t.find("pillbox_input_errors_total 1\n") != std::string::npos);
  CHECK(t.find("pillbox_breaker_open 1\n") != std::string::npos);
  m.set_breaker_open(false);
  MetricsText again;
  m.render(again);
  CHECK(again.text().find("pillbox_breaker_open 0\n") != std::string::npos);
}
