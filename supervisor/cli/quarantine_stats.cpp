// pillbox quarantine stats on the store: records grouped by the bug that
// made them, through the shared printer (quarantine_print.h).
#include "supervisor/cli/commands.h"
#include "supervisor/cli/quarantine_print.h"
#include "supervisor/cli/quarantine_verbs.h"

namespace pillbox::cli {

int quarantine_stats(const QuarantineContext& c) {
  auto filter = read_filter(c.args);
  if (!filter) return quarantine_error(filter.error(), kExitUsage);
  auto groups = c.quarantine.stats(*filter);
  if (!groups) return quarantine_error(groups.error(), kExitSetup);
  std::vector<nlohmann::json> examples;
  for (const auto& g : *groups) examples.emplace_back(g.example_id);
  return print_stats(*groups, examples, c.args.flag("json"));
}

}  // namespace pillbox::cli
