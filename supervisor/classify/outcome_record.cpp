#include "supervisor/classify/outcome_record.h"

#include <limits>

#include "supervisor/classify/outcome.h"

namespace pillbox {

OutcomeRecord outcome_record(const Outcome& o) {
  return {.kind = std::string(to_string(o.kind)), .fingerprint = o.fingerprint, .crash_state = o.crash_state,
          .message = o.message, .signal = o.signal, .syscall = o.syscall, .exit_code = o.exit_code,
          .cpu_ms = static_cast<std::int64_t>(o.cpu_ms), .wall_ms = static_cast<std::int64_t>(o.wall_ms),
          .max_rss_kb = static_cast<std::int64_t>(o.max_rss_kb)};
}

Outcome outcome_of(const OutcomeRecord& r, Kind unknown) {
  Outcome o;
  o.kind = kind_from_string(r.kind).value_or(unknown);
  o.fingerprint = r.fingerprint;
  o.crash_state = r.crash_state;
  o.message = r.message;
  o.signal = r.signal >= 0 && r.signal <= kMaxSignal ? static_cast<int>(r.signal) : 0;
  o.syscall = r.syscall;
  o.exit_code = r.exit_code >= std::numeric_limits<int>::min() && r.exit_code <= std::numeric_limits<int>::max()
                    ? static_cast<int>(r.exit_code)
                    : -1;
  auto figure = [](std::int64_t v) { return v > 0 ? static_cast<std::uint64_t>(v) : std::uint64_t{0}; };
  o.cpu_ms = figure(r.cpu_ms);
  o.wall_ms = figure(r.wall_ms);
  o.max_rss_kb = figure(r.max_rss_kb);
  return o;
}

}  // namespace pillbox
