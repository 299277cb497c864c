#include "supervisor/store/outcome_columns.h"

#include "supervisor/classify/outcome_json.h"

namespace pillbox::store {

void bind_outcome(Statement& s, int first, const OutcomeRecord& r) {
  int i = first;
  s.bind(i++, std::string_view(r.kind));
  s.bind(i++, std::string_view(r.fingerprint));
  s.bind(i++, std::string_view(crash_state_text(r.crash_state)));
  s.bind(i++, std::string_view(r.message));
  s.bind(i++, r.signal);
  s.bind(i++, std::string_view(r.syscall));
  s.bind(i++, r.exit_code);
  s.bind(i++, r.cpu_ms);
  s.bind(i++, r.wall_ms);
  s.bind(i++, r.max_rss_kb);
}

void read_outcome(const Statement& s, int& c, OutcomeRecord& r) {
  r.kind = s.column_text(c++);
  r.fingerprint = s.column_text(c++);
  r.crash_state = crash_state_of_text(s.column_text(c++));
  r.message = s.column_text(c++);
  r.signal = s.column_int(c++);
  r.syscall = s.column_text(c++);
  r.exit_code = s.column_int(c++);
  r.cpu_ms = s.column_int(c++);
  r.wall_ms = s.column_int(c++);
  r.max_rss_kb = s.column_int(c++);
}

}  // namespace pillbox::store
