// pillbox quarantine stats: records grouped by the bug that made them.
#include <cstdio>
#include <nlohmann/json.hpp>
#include <string>

#include "supervisor/cli/commands.h"
#include "supervisor/cli/quarantine_verbs.h"
#include "supervisor/ops/quarantine_json.h"
#include "supervisor/io/terminal_text.h"

namespace pillbox::cli {

int quarantine_stats(const QuarantineContext& c) {
  auto filter = read_filter(c.args);
  if (!filter) return quarantine_error(filter.error(), kExitUsage);
  auto groups = c.quarantine.stats(*filter);
  if (!groups) return quarantine_error(groups.error(), kExitSetup);
  std::string out;
  std::int64_t records = 0;
  if (c.args.flag("json")) {
    for (const auto& g : *groups) {
      const nlohmann::json j = {{"fingerprint", g.fingerprint}, {"kind", g.kind},          {"records", g.records},
                                {"open", g.open},               {"repeats", g.repeats},    {"first_seen", iso_time(g.first_ms)},
                                {"last_seen", iso_time(g.last_ms)}, {"example_id", g.example_id}, {"message", g.message}};
      out += j.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace) + "\n";
    }
    std::fwrite(out.data(), 1, out.size(), stdout);
    return kExitOk;
  }
  char line[1024];
  std::snprintf(line, sizeof line, "%-21s %-17s %7s %6s %7s %-24s %-24s %-8s %s\n", "FINGERPRINT", "KIND", "RECORDS",
                "OPEN", "REPEATS", "FIRST SEEN", "LAST SEEN", "EXAMPLE", "MESSAGE");
  out += line;
  for (const auto& g : *groups) {
    records += g.records;
    std::snprintf(line, sizeof line, "%-21s %-17s %7lld %6lld %7lld %-24s %-24s %-8lld %s\n",
                  table_cell(g.fingerprint, 21).c_str(), g.kind.c_str(), static_cast<long long>(g.records),
                  static_cast<long long>(g.open), static_cast<long long>(g.repeats), iso_time(g.first_ms).c_str(),
                  iso_time(g.last_ms).c_str(), static_cast<long long>(g.example_id), table_cell(g.message, 60).c_str());
    out += line;
  }
  std::fwrite(out.data(), 1, out.size(), stdout);
  std::fprintf(stderr, "%lld record%s in %zu group%s\n", static_cast<long long>(records), records == 1 ? "" : "s",
               groups->size(), groups->size() == 1 ? "" : "s");
  return kExitOk;
}

}  // namespace pillbox::cli
